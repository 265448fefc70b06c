// The public plan of a collection (src/dpmarginals/protocol/plan.py): read as the Python
// reference reads it, hashed as it hashes it.  Version 2: SHA-256 of the RFC 8785 form of
// the plan without its hash.  Version 1 (the domain an object): SHA-256 of Python's
// json.dumps(sort_keys=True) form, which needs each number's written form (1 vs 1.0):
// exact when the plan is given as JSON text (the service client always does).
import { Domain } from "./domain.js";
import { DPMarginalsError } from "./errors.js";
import {
  type Json, type JsonObject, PyFloat, canonical, floatAt, isInt, isObject, pythonDumps,
} from "./json.js";
import { cut, pyr } from "./pyformat.js";
import { sha256Hex } from "./sha256.js";

export const PLAN_FORMAT = "dpmarginals.plan";
export const PLAN_VERSION = 2;

export interface GroupSpec {
  readonly attributes: string[];
  readonly oracle: string;
  readonly epsilon: number;
  readonly cells: number;
}

/** A KeyError of Python's Plan.from_dict: "malformed plan: KeyError('x')". */
export class Missing extends DPMarginalsError {
  constructor(key: string) {
    super(`malformed plan: KeyError(${pyr(key)})`);
  }
}

function get(spec: JsonObject, key: string): Json {
  if (!Object.prototype.hasOwnProperty.call(spec, key)) throw new Missing(key);
  return spec[key]!;
}

/** spec[key] if it is a JSON value of `kind` (an integer counts as a number, a bool as
 *  neither, a float as no integer): a plan is taken as sent or not at all. */
function typed(spec: JsonObject, key: string, kind: "number" | "integer" | "string"): Json {
  const value = get(spec, key);
  const ok = kind === "string" ? typeof value === "string"
    : kind === "integer" ? isInt(spec, key)
      : typeof value === "number" || typeof value === "bigint";
  if (!ok) {
    throw new DPMarginalsError(`plan field ${pyr(key)} must be a JSON ${kind}, got `
                               + pyr(value, floatAt(spec, key)));
  }
  return value;
}

export class Plan {
  constructor(
    readonly version: number,
    readonly method: string,
    readonly epsilon: number,
    readonly longitudinal: number | null,
    readonly domain: Domain,
    readonly groups: GroupSpec[],
    readonly params: JsonObject,
    readonly hash: string,
  ) {}

  get m(): number {
    return this.groups.length;
  }

  /** The plan's content as Python's Plan._content() has it (bins and budgets as floats). */
  content(): Record<string, unknown> {
    const out: Record<string, unknown> = {
      format: PLAN_FORMAT, version: this.version, method: this.method,
      epsilon: new PyFloat(this.epsilon),
    };
    if (this.version === 2) out["longitudinal_epsilon"] = this.longitudinal === null ? null
      : new PyFloat(this.longitudinal);
    out["domain"] = this.domain.attributes.map((a) => [a, this.domain.spec(a)]);
    out["groups"] = this.groups.map((g) => ({ attributes: g.attributes, oracle: g.oracle,
                                              epsilon: new PyFloat(g.epsilon), cells: g.cells }));
    out["params"] = this.params;
    return out;
  }

  /** The plan as JSON values, with its hash (what a server sends). */
  toJSON(): Record<string, unknown> {
    return { ...this.content(), hash: this.hash };
  }

  /** params.earlier_hashes: the plans of the earlier phases a later phase names. */
  earlierHashes(): Json[] {
    const said = this.params["earlier_hashes"];
    return Array.isArray(said) ? said : [];
  }
}

/** SHA-256 (hex) of a plan's content: RFC 8785 (version 2) or Python's sorted JSON with
 *  the domain as [name, spec] pairs (version 1). */
export async function planHash(version: number, content: Record<string, unknown>): Promise<string> {
  return sha256Hex(version === 1 ? pythonDumps(content) : canonical(content));
}

/** Python's Plan.from_dict of a plan without its hash, and the hash of what was read. */
export async function readPlan(spec: JsonObject): Promise<Plan> {
  const format = Object.prototype.hasOwnProperty.call(spec, "format") ? spec["format"] : PLAN_FORMAT;
  if (format !== PLAN_FORMAT) {
    throw new DPMarginalsError(`plan format must be '${PLAN_FORMAT}', got ${pyr(format)}`);
  }
  const version = "version" in spec ? typed(spec, "version", "integer") : PLAN_VERSION;
  if (version !== 1 && version !== 2) {
    throw new DPMarginalsError(`plan version ${version} is not supported (this dpmarginals reads `
                               + "versions [1, 2])");
  }
  let longitudinal: number | null = null;
  if (spec["longitudinal_epsilon"] !== undefined && spec["longitudinal_epsilon"] !== null) {
    longitudinal = Number(typed(spec, "longitudinal_epsilon", "number"));
  }
  const method = typed(spec, "method", "string") as string;
  const epsilon = Number(typed(spec, "epsilon", "number"));
  const rawDomain = get(spec, "domain");
  const domain = version === 1 ? Domain.fromObject(rawDomain) : Domain.fromPairs(rawDomain);
  const rawGroups = get(spec, "groups");
  if (!Array.isArray(rawGroups)) {
    throw new DPMarginalsError(`plan field 'groups' must be a JSON array, got `
                               + cut(pyr(rawGroups), 80));
  }
  const groups = rawGroups.map((g): GroupSpec => {
    if (!isObject(g)) throw new DPMarginalsError(`malformed plan: a group is a JSON object, got ${cut(pyr(g), 80)}`);
    const attrs = get(g, "attributes");
    if (!Array.isArray(attrs) || !attrs.every((a) => typeof a === "string")) {
      throw new DPMarginalsError(`plan field 'attributes' must be a list of names, got `
                                 + cut(pyr(attrs), 80));
    }
    return { attributes: attrs as string[], oracle: typed(g, "oracle", "string") as string,
             epsilon: Number(typed(g, "epsilon", "number")),
             cells: Number(typed(g, "cells", "integer")) };
  });
  const params = spec["params"] === undefined ? {} : spec["params"];
  if (!isObject(params)) {
    throw new DPMarginalsError(`malformed plan: params must be a JSON object, got ${cut(pyr(params), 80)}`);
  }
  if (longitudinal !== null) {
    if (version === 1) throw new DPMarginalsError("a version 1 plan has no longitudinal_epsilon");
    if (!(Number.isFinite(longitudinal) && longitudinal >= epsilon)) {
      throw new DPMarginalsError(`plan longitudinal_epsilon = ${pyr(longitudinal, true)} must be a `
                                 + `finite number >= epsilon = ${pyr(epsilon, true)}`);
    }
  }
  const plan = new Plan(version, method, epsilon, longitudinal, domain, groups, params, "");
  const hash = await planHash(version, plan.content());
  return new Plan(version, method, epsilon, longitudinal, domain, groups, params, hash);
}
