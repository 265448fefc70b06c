// What a device checks of a plan before it draws anything (src/dpmarginals/protocol/
// checks.py), in the same order, refusing in one line that names the field and value.
import { DPMarginalsError, refused } from "./errors.js";
import { fromNumber } from "./exact.js";
import { KNOWN, MAX_GROUP_CELLS, MAX_GROUP_SUPPORT, groupFormat } from "./formats.js";
import { type Json, type JsonObject, floatAt, isObject, parseJson } from "./json.js";
import { ORACLES, lawOf } from "./laws.js";
import { Plan, readPlan } from "./plan.js";
import { commas, cut, pyFormatG, pyRepr, pyr } from "./pyformat.js";

export const EPSILON_CEILING = 20;
const PLAN_KEYS = new Set(["format", "version", "method", "epsilon", "longitudinal_epsilon",
                           "domain", "groups", "params", "hash"]);
const GROUP_KEYS = new Set(["attributes", "oracle", "epsilon", "cells"]);
const TOLERANCE = 1e-9;
const SAFE = 9007199254740991;

function number(value: unknown, field: string): number {
  if (typeof value !== "number" && typeof value !== "bigint") {
    throw refused(`${field} = ${pyr(value)} is not a number`);
  }
  return Number(value);
}

function planEpsilon(value: unknown, field: string, ceiling = EPSILON_CEILING): number {
  const eps = number(value, field);
  if (!(Number.isFinite(eps) && eps > 0)) throw refused(`${field} = ${pyr(eps, true)} is not a finite number > 0`);
  if (eps > ceiling) {
    throw refused(`${field} = ${pyRepr(eps)} exceeds ${pyFormatG(ceiling)}, beyond any meaningful privacy`);
  }
  return eps;
}

/** One of the device owner's settings, or one line: field must be a number (rule names the
 *  setting's kind: cap, floor). */
function deviceNumber(value: unknown, field: string, rule: string): number {
  if (typeof value !== "number") {
    throw new DPMarginalsError(`${field} must be a number (the device's own ${rule}), got ${pyr(value)}`);
  }
  return value;
}

/** One of the device's own caps: a finite number in (0, 20] (max_epsilon), or > 0. */
export function deviceCap(value: unknown, field = "max_epsilon"): number {
  const cap = deviceNumber(value, field, "cap");
  const high = field === "max_epsilon" ? EPSILON_CEILING : Infinity;
  if (!(Number.isFinite(cap) && cap > 0 && cap <= high)) {
    throw new DPMarginalsError(`${field} must be a finite number in (0, ${pyFormatG(high)}], got `
                               + pyr(cap, true));
  }
  return cap;
}

/** The device's minLongitudinalRatio: a finite number >= 1 (1: no floor beyond the plan
 *  check's longitudinal >= epsilon). */
export function longitudinalFloor(value: unknown): number {
  const ratio = deviceNumber(value, "min_longitudinal_ratio", "floor");
  if (!(Number.isFinite(ratio) && ratio >= 1)) {
    throw new DPMarginalsError(`min_longitudinal_ratio must be a finite number >= 1, got ${pyr(ratio, true)}`);
  }
  return ratio;
}

/** The first integer beyond +-(2^53 - 1) in a JSON value, with its path. */
function unsafeInteger(value: Json, where = "plan"): [string, string] | null {
  if (typeof value === "bigint") return [where, value.toString()];
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const v = value[i]!;
      if (typeof v === "number" && Number.isInteger(v) && Math.abs(v) > SAFE && !floatAt(value, i)) {
        return [`${where}[${i}]`, BigInt(v).toString()];
      }
      const found = unsafeInteger(v, `${where}[${i}]`);
      if (found) return found;
    }
  } else if (isObject(value)) {
    for (const key of Object.keys(value)) {
      const path = where === "plan" ? key : `${where}.${key}`;
      const v = value[key]!;
      if (typeof v === "number" && Number.isInteger(v) && Math.abs(v) > SAFE && !floatAt(value, key)) {
        return [path, BigInt(v).toString()];
      }
      const found = unsafeInteger(v, path);
      if (found) return found;
    }
  }
  return null;
}

/** Plan.from_dict, stricter: no unknown field, only exact numbers, the hash present and
 *  equal to the content's. */
async function planFromObject(spec: JsonObject): Promise<Plan> {
  const unknown = Object.keys(spec).filter((k) => !PLAN_KEYS.has(k)).sort();
  if (unknown.length) throw refused(`unknown field ${pyr(unknown[0])} = ${cut(pyr(spec[unknown[0]!]), 80)}`);
  const groups = spec["groups"];
  if (Array.isArray(groups)) {
    groups.forEach((group, i) => {
      if (!isObject(group)) return;
      const extra = Object.keys(group).filter((k) => !GROUP_KEYS.has(k)).sort();
      if (extra.length) {
        throw refused(`groups[${i}] has unknown field ${pyr(extra[0])} = `
                      + `${cut(pyr(group[extra[0]!], floatAt(group, extra[0]!)), 80)} (the client `
                      + "derives every oracle parameter from the group's epsilon and cells)");
      }
    });
  }
  const big = unsafeInteger(spec);
  if (big) throw refused(`${big[0]} = ${big[1]} is beyond 2^53 - 1, which not every client reads exactly`);
  const claimed = spec["hash"];
  if (claimed === undefined || claimed === null) {
    throw refused("hash is missing (the device checks the plan against its hash)");
  }
  let plan: Plan;
  try {
    const body: JsonObject = {};
    for (const key of Object.keys(spec)) if (key !== "hash") body[key] = spec[key]!;
    plan = await readPlan(body);
  } catch (exc) {
    if (exc instanceof DPMarginalsError) throw refused(exc.message);
    throw exc;
  }
  if (claimed !== plan.hash) {
    throw refused(`hash = ${cut(pyr(claimed), 80)} does not match the plan's content (SHA-256 ${plan.hash})`);
  }
  return plan;
}

/** A plan from JSON text or a parsed object, which must carry its hash.  Give the text
 *  (what the server sent) where you can: a parsed object has lost how its numbers were
 *  written (1.0 or 1), which Python's checks and a version 1 plan's hash see. */
export async function parsePlan(source: unknown): Promise<Plan> {
  if (source instanceof Plan) return source;
  let spec: unknown = source;
  if (typeof source === "string") {
    try {
      spec = parseJson(source);
    } catch (exc) {
      throw new DPMarginalsError(`plan is ${(exc as Error).message}`);
    }
  }
  if (!isObject(spec)) {
    throw refused(`a plan is a JSON object, got ${Array.isArray(spec) ? "list" : typeof spec}`);
  }
  return planFromObject(spec);
}

function checkParams(plan: Plan, eps: number): void {
  const params = plan.params;
  const d = plan.domain.length;
  if ("epsilon_per_attribute" in params) {
    const per = planEpsilon(params["epsilon_per_attribute"], "params.epsilon_per_attribute");
    if (per * d > eps * (1 + TOLERANCE)) {
      throw refused(`params.epsilon_per_attribute = ${pyr(params["epsilon_per_attribute"],
        floatAt(params, "epsilon_per_attribute"))} over ${d} attributes composes to `
        + `${pyRepr(per * d)} > the plan's epsilon = ${pyRepr(eps)}`);
    }
  }
  if (!plan.groups.length && "p" in params) {
    const keep = number(params["p"], "params.p");
    if (!(keep > 0.5 && keep < 1)) throw refused(`params.p = ${pyr(params["p"], floatAt(params, "p"))} is outside (0.5, 1)`);
    const implied = Math.log(keep / (1 - keep));
    if (implied > eps * (1 + TOLERANCE)) {
      throw refused(`params.p = ${pyRepr(keep)} implies epsilon ${pyRepr(implied)} > the plan's `
                    + `epsilon = ${pyRepr(eps)}`);
    }
  }
}

/** The plan, if this device accepts it under its own per-report cap `maxEpsilon`; else
 *  PlanRefused (one line, naming the field and its value).  Nothing random is drawn. */
export async function checkPlan(source: unknown, maxEpsilon: number): Promise<Plan> {
  const cap = deviceCap(maxEpsilon);
  const plan = await parsePlan(source);
  const eps = planEpsilon(plan.epsilon, "epsilon");
  if (eps > cap) throw refused(`epsilon = ${pyRepr(eps)} exceeds this device's max_epsilon = ${pyRepr(cap)}`);
  if (plan.longitudinal !== null) planEpsilon(plan.longitudinal, "longitudinal_epsilon", Infinity);
  const dom = plan.domain;
  plan.groups.forEach((spec, i) => {
    const field = `groups[${i}]`;
    if (!KNOWN.includes(spec.oracle)) {
      throw refused(`${field}.oracle = ${pyr(spec.oracle)} is not one of ${pyr(KNOWN)}`);
    }
    const groupEps = planEpsilon(spec.epsilon, `${field}.epsilon`);
    if (groupEps !== eps) {
      throw refused(`${field}.epsilon = ${pyRepr(groupEps)} differs from the plan's epsilon = ${pyRepr(eps)}`);
    }
    const attrs = spec.attributes;
    const bad = attrs.filter((a) => !dom.has(a));
    if (!attrs.length || bad.length || new Set(attrs).size !== attrs.length) {
      const what = bad.length ? `${pyr(bad[0])} is not in the domain` : "must be distinct and non-empty";
      throw refused(`${field}.attributes = ${cut(pyr(attrs), 120)}: ${what}`);
    }
    const cells = attrs.reduce((a, name) => a * BigInt(dom.size(name)), 1n);
    if (BigInt(spec.cells) !== cells) {
      throw refused(`${field}.cells = ${spec.cells} but the marginal over ${cut(pyr(attrs), 120)} has `
                    + `${cells} cells`);
    }
    if ((ORACLES as readonly string[]).includes(spec.oracle)) {
      if (!(cells >= 2n && cells <= BigInt(MAX_GROUP_CELLS))) {
        throw refused(`${field}.cells = ${cells} is outside 2..${MAX_GROUP_CELLS}`);
      }
      lawOf(spec.oracle, fromNumber(groupEps), spec.cells); // derives g, K, p, q
    }
    let size: number;
    try {
      size = groupFormat(plan, i).size;
    } catch (exc) {
      if (exc instanceof DPMarginalsError) throw refused(`${field} (${spec.oracle}): ${exc.message}`);
      throw exc;
    }
    if (!(ORACLES as readonly string[]).includes(spec.oracle) && !(size >= 1 && size <= MAX_GROUP_SUPPORT)) {
      throw refused(`${field} (${spec.oracle}) has a support of ${commas(size)} counts, outside `
                    + `1..${commas(MAX_GROUP_SUPPORT)}`);
    }
  });
  checkParams(plan, eps);
  return plan;
}
