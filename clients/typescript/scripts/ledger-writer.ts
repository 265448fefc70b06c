// (tests) One device reporting under a file ledger: `forever` reports as fast as it can
// (a test kills it with SIGKILL mid-write); `capped PREFIX` makes 4 reports under a total
// cap of 5 (several processes share one ledger: the lock must stop them at 5 in all).
import { BudgetExceeded, Device, FileStore } from "../src/node.js";
import { readPlan } from "../src/plan.js";

const [path, mode, prefix] = process.argv.slice(2);
const body = { format: "dpmarginals.plan", version: 2, method: "calm", epsilon: 0.01,
               longitudinal_epsilon: mode === "forever" ? 0.05 : null, domain: [["a", 2], ["b", 3]],
               groups: [{ attributes: ["a", "b"], oracle: mode === "forever" ? "oue" : "grr",
                          epsilon: 0.01, cells: 6 }], params: {} };
const plan = { ...body, hash: (await readPlan(body)).hash };
const phone = await Device.open(new FileStore(path!),
                                { maxEpsilon: 1, maxTotalEpsilon: mode === "forever" ? 1e6 : 0.05 });
if (mode === "forever") {
  for (let i = 0; ; i++) {
    await phone.report(plan, { a: i % 2, b: i % 3 }, { origin: "https://x", campaign: `c${i}` });
  }
} else {
  for (let i = 0; i < 4; i++) {
    try {
      await phone.report(plan, [1, 2], { origin: "https://x", campaign: `${prefix}${i}` });
    } catch (exc) {
      if (!(exc instanceof BudgetExceeded)) throw exc;
    }
  }
}
