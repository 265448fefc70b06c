// The single-file browser bundles (esbuild): bundle/dpmarginals.min.mjs (an ES module)
// and bundle/dpmarginals.min.js (a classic script defining the global `dpmarginals`), and
// their sizes minified and gzipped (bundle/sizes.json).
import { build } from "esbuild";
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { gzipSync } from "node:zlib";

const here = new URL("..", import.meta.url).pathname;
rmSync(`${here}bundle`, { recursive: true, force: true });
mkdirSync(`${here}bundle`, { recursive: true });
const common = {
  entryPoints: [`${here}src/index.ts`], bundle: true, minify: true, target: "es2020",
  platform: "browser", legalComments: "none", logLevel: "warning",
};
// The ES module: @noble/hashes (SHA-256 where WebCrypto is absent) in a file of its own,
// fetched only by a page that is not a secure context.
await build({ ...common, format: "esm", splitting: true, outdir: `${here}bundle`,
              entryNames: "dpmarginals.min", chunkNames: "dpmarginals-sha256-[hash].min",
              outExtension: { ".js": ".mjs" } });
await build({ ...common, format: "iife", globalName: "dpmarginals",
              outfile: `${here}bundle/dpmarginals.min.js` });
const sizes = {};
const chunk = readdirSync(`${here}bundle`).find((f) => f.startsWith("dpmarginals-sha256-"));
for (const name of ["dpmarginals.min.mjs", chunk, "dpmarginals.min.js"]) {
  const bytes = readFileSync(`${here}bundle/${name}`);
  sizes[name] = { minified: bytes.length, gzipped: gzipSync(bytes, { level: 9 }).length };
}
writeFileSync(`${here}bundle/sizes.json`, JSON.stringify(sizes, null, 1) + "\n");
for (const [name, s] of Object.entries(sizes)) {
  console.log(`${name}: ${s.minified} bytes minified, ${s.gzipped} bytes (${(s.gzipped / 1024).toFixed(1)} KiB) gzipped`);
}
