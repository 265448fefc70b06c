// The single-file browser bundles (esbuild): bundle/dpmarginals.min.mjs (an ES module)
// and bundle/dpmarginals.min.js (a classic script defining the global `dpmarginals`), and
// their sizes minified and gzipped.  `node scripts/bundle.mjs --check` fails past 15 KB.
import { build } from "esbuild";
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { gzipSync } from "node:zlib";

const here = new URL("..", import.meta.url).pathname;
mkdirSync(`${here}bundle`, { recursive: true });
const common = {
  entryPoints: [`${here}src/index.ts`], bundle: true, minify: true, target: "es2020",
  platform: "browser", legalComments: "none", logLevel: "warning",
};
await build({ ...common, format: "esm", outfile: `${here}bundle/dpmarginals.min.mjs` });
await build({ ...common, format: "iife", globalName: "dpmarginals",
              outfile: `${here}bundle/dpmarginals.min.js` });
const sizes = {};
for (const name of ["dpmarginals.min.mjs", "dpmarginals.min.js"]) {
  const bytes = readFileSync(`${here}bundle/${name}`);
  sizes[name] = { minified: bytes.length, gzipped: gzipSync(bytes, { level: 9 }).length };
}
writeFileSync(`${here}bundle/sizes.json`, JSON.stringify(sizes, null, 1) + "\n");
for (const [name, s] of Object.entries(sizes)) {
  console.log(`${name}: ${s.minified} bytes minified, ${s.gzipped} bytes (${(s.gzipped / 1024).toFixed(1)} KiB) gzipped`);
}
if (process.argv.includes("--check") && sizes["dpmarginals.min.mjs"].gzipped > 15 * 1024) {
  console.error("the bundle is over 15 KiB minified and gzipped");
  process.exit(1);
}
