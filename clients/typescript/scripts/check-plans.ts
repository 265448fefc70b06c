// (tests) The TypeScript client's view of plans the Python reference wrote: for each
// {"name", "plan"} of the JSON file given, the hash it computes and whether a device with
// max_epsilon 20 accepts it (else the refusal), as JSON lines on stdout.
import { readFileSync } from "node:fs";
import { checkPlan, parsePlan } from "../src/checks.js";
import { type JsonObject, parseJson, stringify } from "../src/json.js";

const items = parseJson(readFileSync(process.argv[2]!, "utf8")) as JsonObject[];
for (const item of items) {
  let hash: string | null = null;
  let refusal: string | null = null;
  try {
    const { hash: _, ...body } = item["plan"] as JsonObject;
    hash = (await parsePlan({ ...body, hash: (item["plan"] as JsonObject)["hash"] ?? null })).hash;
    await checkPlan(item["plan"], 20);
  } catch (exc) {
    refusal = (exc as Error).message;
  }
  process.stdout.write(stringify({ name: item["name"], hash, refusal }) + "\n");
}
