// A plan's domain: attributes, sizes and the public names of their values, read as
// src/dpmarginals/core/domain.py reads them.  The normalized form (`spec`) is what the
// plan hash and a memoized group's family are computed over, so it is Python's exactly:
// bin edges are floats, default bin names Python's "[0, 18)", numeric labels str(x).
import { DPMarginalsError, RecordValueError } from "./errors.js";
import { type Json, type JsonObject, floatAt, isObject, keysOf } from "./json.js";
import { PyFloat, cut, pyFormatG, pyNumberText, pyr } from "./pyformat.js";

export interface Labels {
  readonly names: string[];
  readonly bins: number[] | null;
  readonly other: boolean;
}

function labelText(attr: string, container: object, key: string | number): string {
  const x = (container as Record<string, unknown>)[key as string];
  if (typeof x === "string") return x;
  if ((typeof x === "number" && Number.isFinite(x)) || typeof x === "bigint") {
    return pyNumberText(x, floatAt(container, key));
  }
  throw new DPMarginalsError(`attribute ${pyr(attr)}: a value label must be a string or a `
                             + `number, got ${pyr(x)}`);
}

function edges(attr: string, bins: unknown): number[] {
  const bad = () => new DPMarginalsError(`attribute ${pyr(attr)}: bins must be at least 2 finite, `
                                         + `strictly increasing edges, got ${pyr(bins)}`);
  if (!Array.isArray(bins) || !bins.every((b) => typeof b === "number"
                                          || typeof b === "bigint")) {
    throw new DPMarginalsError(`attribute ${pyr(attr)}: bins must be numbers, got ${pyr(bins)}`);
  }
  const out = bins.map(Number);
  if (out.length < 2 || !out.every(Number.isFinite)) throw bad();
  for (let j = 1; j < out.length; j++) if (!(out[j]! > out[j - 1]!)) throw bad();
  return out;
}

function labelsFromSpec(attr: string, raw: Json): Labels {
  const spec: JsonObject = Array.isArray(raw) ? { labels: raw } : (raw as JsonObject);
  const unknown = Object.keys(spec).filter((k) => !["labels", "bins", "other"].includes(k)).sort();
  if (unknown.length) {
    throw new DPMarginalsError(`attribute ${pyr(attr)}: unknown keys ${pyr(unknown)} (an attribute `
                               + "has 'labels', 'bins' and 'other')");
  }
  const other = Object.prototype.hasOwnProperty.call(spec, "other") ? spec["other"] : false;
  if (!(typeof other === "boolean" || (typeof other === "string" && other.trim()))) {
    throw new DPMarginalsError(`attribute ${pyr(attr)}: 'other' must be true, false or the name `
                               + `of the catch-all value, got ${pyr(other)}`);
  }
  let bins: number[] | null = null;
  let source: object | null = Object.prototype.hasOwnProperty.call(spec, "labels")
    && spec["labels"] !== null ? spec : null;
  let names: string[] | null = null;
  if (spec["bins"] !== undefined && spec["bins"] !== null) {
    bins = edges(attr, spec["bins"]);
    if (source === null) {
      names = bins.slice(1).map((b, j) => `[${pyFormatG(bins![j]!)}, ${pyFormatG(b)})`);
      names[names.length - 1] = names[names.length - 1]!.slice(0, -1) + "]";
    }
  }
  if (names === null) {
    const listed = source === null ? undefined : (source as JsonObject)["labels"];
    if (!Array.isArray(listed) || !listed.length) {
      throw new DPMarginalsError(`attribute ${pyr(attr)}: labels must be a non-empty list, got `
                                 + pyr(listed ?? null));
    }
    names = listed.map((_, j) => labelText(attr, listed, j));
    source = listed;
  }
  if (other) names.push(other === true ? "other" : other);
  const seen = new Set<string>();
  const dup = [...new Set(names.filter((n) => seen.has(n) || !seen.add(n)))].sort();
  if (dup.length) throw new DPMarginalsError(`attribute ${pyr(attr)}: value labels repeat: ${pyr(dup)}`);
  if (bins !== null && bins.length - 1 + (other ? 1 : 0) !== names.length) {
    throw new DPMarginalsError(`attribute ${pyr(attr)}: ${bins.length} bin edges need `
                               + `${bins.length - 1 + (other ? 1 : 0)} labels, got ${names.length}`);
  }
  return { names, bins, other: !!other };
}

export class Domain {
  constructor(readonly attributes: string[], readonly sizes: number[],
              readonly labels: (Labels | null)[]) {}

  /** From a domain JSON object's entries (in order): a size, labels, or
   *  {"labels", "bins", "other"}; {"domain": n} / {"size": n} as PrivMRF writes it. */
  static fromEntries(entries: [string, Json][]): Domain {
    if (!entries.length) {
      throw new DPMarginalsError("domain JSON must be a non-empty object {attribute: size}");
    }
    const attrs: string[] = [];
    const sizes: number[] = [];
    const labels: (Labels | null)[] = [];
    for (const [name, raw] of entries) {
      let value: Json = raw;
      let lab: Labels | null = null;
      if (isObject(raw) && !("labels" in raw) && !("bins" in raw)) {
        const known = ["domain", "size"].filter((k) => k in raw);
        if (!known.length) {
          throw new DPMarginalsError(`domain entry ${pyr(name)} needs a size ('domain' or 'size'), `
                                     + `'labels' or 'bins': ${cut(pyr(raw), 120)}`);
        }
        if (known.length === 2 && raw["domain"] !== raw["size"]) {
          throw new DPMarginalsError(`domain entry ${pyr(name)} gives two sizes ('domain' and 'size')`);
        }
        value = raw[known[0]!]!;
      } else if (isObject(raw) || Array.isArray(raw)) {
        lab = labelsFromSpec(name, raw);
        value = lab.names.length;
      }
      if (typeof value !== "number" || !Number.isInteger(value)) {
        throw new DPMarginalsError(`domain size of attribute ${pyr(name)} must be an integer, `
                                   + `got ${pyr(value)}`);
      }
      if (value < 1) {
        throw new DPMarginalsError(`attribute ${pyr(name)} must have size >= 1, got ${value}`);
      }
      attrs.push(name);
      sizes.push(value);
      labels.push(lab);
    }
    return new Domain(attrs, sizes, labels);
  }

  /** A version 2 plan's domain: a list of [name, spec] pairs. */
  static fromPairs(value: Json): Domain {
    if (!Array.isArray(value) || !value.every((p) => Array.isArray(p) && p.length === 2
                                              && typeof p[0] === "string")) {
      throw new DPMarginalsError("plan field 'domain' must be a list of [name, spec] pairs, got "
                                 + pyr(cut(JSON.stringify(value) ?? String(value))));
    }
    const pairs = value as [string, Json][];
    const names = pairs.map((p) => p[0]);
    const twice = names.find((n, j) => names.indexOf(n) !== j);
    if (twice !== undefined) {
      throw new DPMarginalsError(`plan field 'domain' names attribute ${pyr(twice)} twice`);
    }
    return Domain.fromEntries(pairs.map(([n, s]) => [n, s]));
  }

  /** A version 1 plan's domain: an object {name: spec} (in its text's order). */
  static fromObject(value: Json): Domain {
    if (!isObject(value)) {
      throw new DPMarginalsError("domain JSON must be a non-empty object {attribute: size}");
    }
    return Domain.fromEntries(keysOf(value).map((k) => [k, value[k]!]));
  }

  get length(): number {
    return this.attributes.length;
  }

  has(attr: string): boolean {
    return this.attributes.includes(attr);
  }

  index(attr: string): number {
    const i = this.attributes.indexOf(attr);
    if (i < 0) {
      throw new DPMarginalsError(`unknown attribute ${pyr(attr)}; the domain has ${pyr(this.attributes)}`);
    }
    return i;
  }

  size(attr: string): number {
    return this.sizes[this.index(attr)]!;
  }

  /** Python's Domain.to_dict()[attr]: the size, or the labels' normalized spec. */
  spec(attr: string): Json | PyFloat[] | { [key: string]: unknown } {
    const i = this.index(attr);
    const lab = this.labels[i];
    if (!lab) return this.sizes[i]!;
    const listed = lab.other ? lab.names.slice(0, -1) : lab.names.slice();
    if (lab.bins === null && !lab.other) return listed;
    const out: { [key: string]: unknown } = { labels: listed };
    if (lab.bins !== null) out["bins"] = lab.bins.map((b) => new PyFloat(b));
    if (lab.other) out["other"] = lab.names[lab.names.length - 1];
    return out;
  }

  /** The code of one raw value of a labelled attribute (a label; for binned attributes a
   *  number, or the name of its bin; an unlisted value goes to 'other' where declared). */
  codeOf(i: number, value: unknown): number {
    const lab = this.labels[i]!;
    const attr = this.attributes[i]!;
    let code: number | null = null;
    if (lab.bins !== null) {
      if ((typeof value === "number" && !Number.isNaN(value)) || typeof value === "bigint") {
        const x = Number(value);
        const e = lab.bins;
        if (e[0]! <= x && x <= e[e.length - 1]!) {
          let right = 0;
          while (right < e.length && e[right]! <= x) right++;
          code = Math.min(right - 1, e.length - 2);
        }
      } else if (typeof value === "string" && lab.names.includes(value)) {
        code = lab.names.indexOf(value);
      }
    } else if (typeof value === "string" && lab.names.includes(value)) {
      code = lab.names.indexOf(value);
    }
    if (code === null && lab.other) code = lab.names.length - 1;
    if (code === null) {
      throw new DPMarginalsError(`attribute ${pyr(attr)}: value ${pyr(value)} is not in the declared `
                                 + `domain ${pyr(lab.names.slice(0, 10))}`);
    }
    return code;
  }
}

/** A record's codes in domain order (only `attributes` are read): an object by attribute
 *  name, or an array in the domain's order; a value is an integer code or, where the
 *  domain declares them, one of the attribute's labels ("female") or a raw number its
 *  bins cut (an age of 37). */
export function recordRow(domain: Domain, record: unknown, attributes: string[]): number[] {
  const row = new Array<number>(domain.length).fill(0);
  let items: [number, unknown][];
  if (Array.isArray(record)) {
    if (record.length !== domain.length) {
      throw new DPMarginalsError(`a record needs ${domain.length} values in the domain's order `
                                 + `${pyr(domain.attributes)}, got ${record.length}`);
    }
    items = attributes.map((a) => [domain.index(a), record[domain.index(a)]]);
  } else if (typeof record === "object" && record !== null) {
    const rec = record as Record<string, unknown>;
    const missing = attributes.filter((a) => !Object.prototype.hasOwnProperty.call(rec, a));
    if (missing.length) throw new RecordValueError(`the record lacks the attributes ${pyr(missing)}`);
    items = attributes.map((a) => [domain.index(a), rec[a]]);
  } else {
    throw new DPMarginalsError(`a record is an object {attribute: value} or an array, got ${pyr(record)}`);
  }
  for (const [i, value] of items) {
    const lab = domain.labels[i];
    const attr = domain.attributes[i]!;
    if (lab && (typeof value === "string" || lab.bins !== null)) {
      try {
        row[i] = domain.codeOf(i, value);
      } catch (e) {
        throw e instanceof DPMarginalsError ? new RecordValueError(e.message) : e;
      }
      continue;
    }
    const v = typeof value === "bigint" ? Number(value) : value;
    if (typeof v !== "number" || !Number.isInteger(v)) {
      throw new RecordValueError(`attribute ${pyr(attr)} must be an integer code`
                                 + `${lab ? " or one of its labels" : ""}, got ${pyr(value)}`);
    }
    if (!(v >= 0 && v < domain.sizes[i]!)) {
      throw new RecordValueError(`value ${v} of attribute ${pyr(attr)} is outside its domain `
                                 + `0..${domain.sizes[i]! - 1}`);
    }
    row[i] = v;
  }
  return row;
}
