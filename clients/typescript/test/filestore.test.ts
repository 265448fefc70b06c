// The Node ledger file: written atomically (temporary file, fsync, rename, the folder
// fsynced), readable after a kill -9 at any moment with its charges matching its reports,
// and exclusive across processes (several processes under one total cap never overspend).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { Device, FileStore, Ledger, LedgerError } from "../src/node.js";
import { toNumber } from "../src/exact.js";
import { planWith, RECORD } from "./plans.js";

const dirs: string[] = [];
after(() => { for (const d of dirs) rmSync(d, { recursive: true, force: true }); });
const tempDir = (): string => { const d = mkdtempSync(join(tmpdir(), "dpm-")); dirs.push(d); return d; };

const WRITER = fileURLToPath(new URL("../scripts/ledger-writer.js", import.meta.url));

function run(args: string[]): Promise<number | null> {
  return new Promise((resolve) => spawn(process.execPath, [WRITER, ...args], { stdio: "inherit" })
    .on("exit", (code) => resolve(code)));
}

test("a ledger file round-trips, and a corrupt one is refused, never reset", async () => {
  const dir = tempDir();
  const path = join(dir, "ledger.json");
  const phone = await Device.open(new FileStore(path), { maxEpsilon: 1, maxTotalEpsilon: 3 });
  await phone.report(await planWith(), RECORD, { origin: "https://x", campaign: "a" });
  const again = await Device.open(new FileStore(path), { maxEpsilon: 1, maxTotalEpsilon: 3 });
  assert.equal(toNumber(again.ledger.total()), 1);
  writeFileSync(path, '{"format": "dpmarginals.ledger", "version": 2, "campaigns": [}');
  await assert.rejects(Device.open(new FileStore(path), { maxEpsilon: 1, maxTotalEpsilon: 3 }),
                       (e: Error) => e instanceof LedgerError && e.message.includes(`ledger '${path}' is corrupt`));
  assert.deepEqual(readdirSync(dir).sort(), ["ledger.json"]);
});

test("a ledger cut by kill -9 mid-write stays readable and counted", async () => {
  const dir = tempDir();
  const path = join(dir, "ledger.json");
  let last = 0;
  for (let k = 0; k < 6; k++) {
    const child = spawn(process.execPath, [WRITER, path, "forever"], { stdio: "inherit" });
    await new Promise((r) => setTimeout(r, 500 + Math.random() * 600));
    child.kill("SIGKILL");
    await new Promise((r) => child.on("exit", r));
    const ledger = await Ledger.open(new FileStore(path));
    const doc = ledger.document() as { campaigns: Record<string, { report: unknown }>; charges: unknown[] };
    const reported = Object.values(doc.campaigns).filter((e) => e.report !== null).length;
    assert.equal(doc.charges.length, reported);
    assert.ok(reported >= last);
    last = reported;
  }
  assert.ok(last > 0);
  // a writer killed holding the lock left its lock folder (and maybe a temporary file):
  // the next locked write takes the lock over and removes the temporary files
  const phone = await Device.open(new FileStore(path), { maxEpsilon: 1, maxTotalEpsilon: 1e6 });
  await phone.report(await planWith(), RECORD, { origin: "https://x", campaign: "after" });
  assert.deepEqual(readdirSync(dir).filter((f) => f.endsWith(".tmp") || f.endsWith(".lockdir")), []);
});

test("processes of one device never overspend: the file's lock", async () => {
  const dir = tempDir();
  const path = join(dir, "ledger.json");
  const codes = await Promise.all(Array.from({ length: 6 }, (_, j) => run([path, "capped", `p${j}-`])));
  assert.deepEqual(codes, [0, 0, 0, 0, 0, 0]);
  const ledger = await Ledger.open(new FileStore(path));
  assert.equal(toNumber(ledger.total()), 0.05);
  assert.equal((ledger.document()["charges"] as unknown[]).length, 5);
});

test("a live holder's lock is never taken, however old; a dead one's is", async () => {
  const dir = tempDir();
  const path = join(dir, "ledger.json");
  const lock = `${path}.lockdir`;
  mkdirSync(lock);
  writeFileSync(join(lock, "pid"), `${process.pid} feedc0de`); // this live process, stopped
  const old = new Date(Date.now() - 10 * 60_000);
  utimesSync(lock, old, old); // ten minutes old: a stopped holder is still a holder
  const store = new FileStore(path, 1);
  await assert.rejects(Device.open(store, { maxEpsilon: 1, maxTotalEpsilon: 3 })
    .then((d) => d.report(planWith(), RECORD, { origin: "https://x", campaign: "a" })),
  (e: Error) => e instanceof LedgerError && e.message.includes(`is held by process ${process.pid}`));
  assert.equal(readFileSync(join(lock, "pid"), "utf8"), `${process.pid} feedc0de`);
  writeFileSync(join(lock, "pid"), "2147483646 0"); // no such process: taken over
  const phone = await Device.open(new FileStore(path, 1), { maxEpsilon: 1, maxTotalEpsilon: 3 });
  await phone.report(await planWith(), RECORD, { origin: "https://x", campaign: "b" });
  assert.deepEqual(readdirSync(dir).sort(), ["ledger.json"]);
});

test("without a global crypto (Node 18), the ./node entry supplies node:crypto's WebCrypto", async () => {
  const code = `
    Object.defineProperty(globalThis, "crypto", { value: undefined, configurable: true });
    const main = await import(${JSON.stringify(new URL("../src/index.js", import.meta.url).href)});
    const plans = await import(${JSON.stringify(new URL("./plans.js", import.meta.url).href)});
    const plan = await plans.planWith();
    const phone = await main.Device.open(null, { maxEpsilon: 1, maxTotalEpsilon: 3 });
    let refused = "";
    try { await phone.report(plan, plans.RECORD, { origin: "https://x", campaign: "a" }); }
    catch (exc) { refused = exc.message; }
    await import(${JSON.stringify(new URL("../src/node.js", import.meta.url).href)});
    const report = await phone.report(plan, plans.RECORD, { origin: "https://x", campaign: "b" });
    console.log(JSON.stringify({ refused, group: report.group, id: report.report_id.length }));`;
  const out = await new Promise<string>((resolve, reject) => {
    const child = spawn(process.execPath, ["--input-type=module", "-e", code]);
    let text = "";
    child.stdout.on("data", (d) => (text += d));
    child.stderr.on("data", (d) => process.stderr.write(d));
    child.on("exit", (c) => (c === 0 ? resolve(text) : reject(new Error(`exit ${c}`))));
  });
  const got = JSON.parse(out) as { refused: string; group: number; id: number };
  assert.match(got.refused, /refuses to run without crypto\.getRandomValues/);
  assert.equal(got.id, 32);
});
