// (benchmarks/client_rates.py) The TypeScript client's rates on Node, one report at a time
// as a device makes them, with crypto.getRandomValues: GRR and OUE over L = 64 cells at
// epsilon 1.  "randomizer": the format's report from a record's cell (words to payload);
// "device": Device.open (a new person, its ledger in memory) + device.report (the plan's
// checks, the charge, the randomization, the ledger's write, a report id).
import { checkPlan } from "../src/checks.js";
import { Device } from "../src/device.js";
import { groupFormat } from "../src/formats.js";
import { readPlan } from "../src/plan.js";
import { SecureWords } from "../src/random.js";
import { WordDraws } from "../src/samplers.js";

const seconds = Number(process.argv[2] ?? 2);

async function plan(oracle: string) {
  const body = { format: "dpmarginals.plan", version: 2, method: "calm", epsilon: 1.0,
                 longitudinal_epsilon: null, domain: [["x", 8], ["y", 8]],
                 groups: [{ attributes: ["x", "y"], oracle, epsilon: 1.0, cells: 64 }], params: {} };
  return checkPlan({ ...body, hash: (await readPlan(body)).hash }, 1.0);
}

async function rate(body: (i: number) => unknown | Promise<unknown>): Promise<number> {
  for (let i = 0; i < 200; i++) await body(i); // warm up
  let n = 0;
  const start = performance.now();
  while (performance.now() - start < seconds * 1000) {
    for (let j = 0; j < 100; j++) await body(n++);
  }
  return n / ((performance.now() - start) / 1000);
}

const out: Record<string, Record<string, number>> = {};
for (const oracle of ["grr", "oue"]) {
  const p = await plan(oracle);
  const fmt = groupFormat(p, 0);
  const draws = new WordDraws(new SecureWords());
  out[oracle] = {
    randomizer: await rate((i) => fmt.perturb(draws, i % 64)),
    device: await rate(async (i) => {
      const phone = await Device.open(null, { maxEpsilon: 1, maxTotalEpsilon: 10 });
      return phone.report(p, { x: i % 8, y: (i >> 3) % 8 }, { origin: "https://x", campaign: "c", group: 0 });
    }),
  };
}
process.stdout.write(JSON.stringify({ node: process.version, ...out }) + "\n");
