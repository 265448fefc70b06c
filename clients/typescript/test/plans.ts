// Plans for the tests, as a (possibly dishonest) server would send them: JSON bodies with
// a matching hash (tests/test_hostile_server.py's plan_with and served).
import { type Json, type JsonObject } from "../src/json.js";
import { readPlan } from "../src/plan.js";

export const DOMAIN: Json = [["a", 2], ["b", 3], ["c", 5]];
export const RECORD = { a: 1, b: 2, c: 4 };
export const ORIGIN = "https://stats.example.org";

export interface PlanOptions {
  oracle?: string;
  epsilon?: number;
  groupEpsilon?: number;
  longitudinal?: number | null;
  params?: JsonObject;
  change?: JsonObject;
  method?: string;
}

/** Three groups over pairs of a, b, c; group 1 gets `groupEpsilon` and `change`. */
export function planBody(o: PlanOptions = {}): JsonObject {
  const epsilon = o.epsilon ?? 1.0;
  const oracle = o.oracle ?? "oue";
  const groups: JsonObject[] = [[["a", "b"], 6], [["b", "c"], 15], [["a", "c"], 10]].map(
    ([attributes, cells]) => ({ attributes: attributes as Json, oracle, epsilon, cells: cells as number }));
  groups[1] = { ...groups[1]!, ...(o.change ?? {}) };
  if (o.groupEpsilon !== undefined) groups[1]!["epsilon"] = o.groupEpsilon;
  return { format: "dpmarginals.plan", version: 2, method: o.method ?? "calm", epsilon,
           longitudinal_epsilon: o.longitudinal ?? null, domain: DOMAIN, groups,
           params: { k: 2, ...(o.params ?? {}) } };
}

/** The body with the hash of its content (what a server computes and sends). */
export async function served(body: JsonObject): Promise<JsonObject> {
  return { ...body, hash: (await readPlan(body)).hash };
}

export async function planWith(o: PlanOptions = {}): Promise<JsonObject> {
  return served(planBody(o));
}

/** A matrix plan over one attribute of `weights[0].length` values. */
export async function matrixPlan(weights: bigint[][], epsilon = 1.0): Promise<JsonObject> {
  const rows = weights.length;
  const cols = weights[0]!.length;
  const bytes = new Uint8Array(8 * rows * cols);
  const view = new DataView(bytes.buffer);
  weights.flat().forEach((w, i) => view.setBigUint64(8 * i, w, true));
  const chunks: string[] = [];
  for (let i = 0; i < bytes.length; i += 3072) chunks.push(Buffer.from(bytes.subarray(i, i + 3072)).toString("base64"));
  return served({ format: "dpmarginals.plan", version: 2, method: "wfm", epsilon, longitudinal_epsilon: null,
                  domain: [["a", cols]], groups: [{ attributes: ["a"], oracle: "matrix", epsilon, cells: cols }],
                  params: { k: 1, strategy: { rows, columns: cols, uint64: chunks } } });
}

/** An em plan over a, b, c (each attribute at eps / 3). */
export async function emPlan(names: Json = ["grr", "grr", "grr"], extra: JsonObject = {}): Promise<JsonObject> {
  return served({ format: "dpmarginals.plan", version: 2, method: "em", epsilon: 1.0, longitudinal_epsilon: null,
                  domain: DOMAIN, groups: [{ attributes: ["a", "b", "c"], oracle: "em", epsilon: 1.0, cells: 30 }],
                  params: { k: 2, attribute_oracles: names, epsilon_per_attribute: 1 / 3, ...extra } });
}
