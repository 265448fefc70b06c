// Every group's report format, rebuilt from the plan alone (src/dpmarginals/protocol/
// formats.py): the randomizer's input, a fresh report through the word-level samplers,
// and for a memoized plan the permanent response and the instantaneous noise on it.
// docs/device-spec.md §3 (the formats' table) and §4 (memoization) state the words.
import { DPMarginalsError } from "./errors.js";
import { PRIME, WORD_N, binaryKeep, expLowerBound, fromNumber, rat, toNumber } from "./exact.js";
import { type Json, floatAt, isInt, isObject } from "./json.js";
import {
  type GrrLaw, type Law, MEMOIZED, type Memo, ORACLES, type UnaryLaw, grrLaw, lawOf, memoLaw,
  unaryLaw,
} from "./laws.js";
import type { Plan } from "./plan.js";
import { cut, pyRepr, pyr } from "./pyformat.js";
import { type Draws, bitLength, popcount } from "./samplers.js";

export const FORMATS = ["ht", "cms", "em", "matrix"] as const;
export const KNOWN: readonly string[] = [...ORACLES, ...FORMATS];
export const MAX_CODE_BITS = 62;
export const MAX_GROUP_SUPPORT = 2 ** 23;
export const MAX_GROUP_CELLS = 2 ** 20;
export const MAX_STRATEGY_ENTRIES = 2 ** 24;
const STRATEGY_TOTAL = 1n << 63n;
const STRATEGY_CHUNK = 3072;
const STRATEGY_TEXT = 4096;

export type Payload = number | bigint | string | (number | bigint)[];
export type Input = number | bigint | number[];

/** One group's report format. */
export interface Format {
  readonly name: string;
  /** the length of the group's support vector */
  readonly size: number;
  /** the group's attribute values (in the group's order) -> the randomizer's input */
  encode(values: number[]): Input;
  /** a fresh report (a memoized plan: a new permanent response, then its noise) */
  perturb(draws: Draws, x: Input): Payload;
  /** a memoized plan's permanent response (the payload a device keeps) */
  permanent?(draws: Draws, x: Input): Payload;
  /** a memoized plan's report from a kept permanent response */
  instantaneous?(draws: Draws, permanent: Payload): Payload;
  /** a kept permanent response, checked as a report's payload (null: valid) */
  invalid?(payload: Json): string | null;
}

// -- shared -------------------------------------------------------------------------------
export function bitsFor(count: number): number {
  return count <= 1 ? 0 : bitLength(count - 1);
}

function ravel(values: number[], sizes: number[]): number {
  let cell = 0;
  for (let j = 0; j < sizes.length; j++) cell = cell * sizes[j]! + values[j]!;
  return cell;
}

const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

export function base64(bytes: Uint8Array): string {
  let out = "";
  for (let i = 0; i < bytes.length; i += 3) {
    const a = bytes[i]!;
    const b = bytes[i + 1];
    const c = bytes[i + 2];
    out += B64[a >> 2]! + B64[((a & 3) << 4) | ((b ?? 0) >> 4)]!
      + (b === undefined ? "=" : B64[((b & 15) << 2) | ((c ?? 0) >> 6)]!)
      + (c === undefined ? "=" : B64[c & 63]!);
  }
  return out;
}

const B64_FORM = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** Strict base64 (the alphabet, padding only at the end); null if malformed. */
export function unbase64(text: string): Uint8Array | null {
  if (!B64_FORM.test(text)) return null;
  const body = text.replace(/=+$/, "");
  const out = new Uint8Array(Math.floor((body.length * 3) / 4));
  let acc = 0;
  let bits = 0;
  let j = 0;
  for (const ch of body) {
    acc = (acc << 6) | B64.indexOf(ch);
    bits += 6;
    if (bits >= 8) { bits -= 8; out[j++] = (acc >> bits) & 0xff; }
  }
  return out;
}

function parityOf(x: number | bigint): number {
  if (typeof x === "number") return popcount(x) & 1;
  let p = 0;
  while (x) { p ^= popcount(Number(x & 0xffffffffn)) & 1; x >>= 32n; }
  return p;
}

function isPayloadInt(x: unknown): x is number | bigint {
  return (typeof x === "number" && Number.isInteger(x)) || typeof x === "bigint";
}

// -- one cell of the marginal through a frequency oracle ----------------------------------
/** Unary report of x: Bernoulli(q) bytes, padding cleared, then bit x := coin(p). */
function unaryReport(draws: Draws, law: UnaryLaw, x: number): Uint8Array {
  const out = draws.bits(rat(BigInt(law.q), WORD_N), law.size);
  const hit = draws.coin(law.p);
  const bit = 1 << (x & 7);
  out[x >> 3] = (out[x >> 3]! & ~bit) | (hit ? bit : 0);
  return out;
}

function fresh(draws: Draws, law: Law, x: number): Payload {
  switch (law.kind) {
    case "grr": return draws.keepOrUniform(x, law.keep, law.size);
    case "oue": case "sue": return base64(unaryReport(draws, law, x));
    case "olh": {
      const a = 1 + draws.uniform(PRIME - 1);
      const b = draws.uniform(PRIME);
      const h = ((a * x + b) % PRIME) % law.g; // a x + b < 2^52: exact
      const y = draws.keepOrUniform(h, law.keep, law.g);
      return [(BigInt(a) << 32n) | BigInt(b), y];
    }
    case "hr": {
      const j = draws.uniform(law.K);
      const kept = draws.coin(law.p);
      return [j, parityOf((x + 1) & j) ^ (kept ? 0 : 1)];
    }
  }
}

/** The packed bytes of a unary payload, or why they are not one. */
function unaryBytes(payload: Json, size: number, name: string): Uint8Array | string {
  const width = (size + 7) >> 3;
  const expected = 4 * Math.floor((width + 2) / 3);
  if (typeof payload !== "string" || payload.length !== expected) {
    return `${name} payload must be a base64 string of ${width} bytes (${expected} characters)`;
  }
  const raw = unbase64(payload);
  if (raw === null || raw.length !== width || base64(raw) !== payload) {
    return `${name} payload is not the canonical base64 of ${width} bytes`;
  }
  if (size % 8 && raw[width - 1]! >> (size % 8)) return `${name} payload sets bits beyond value ${size - 1}`;
  return raw;
}

export class CellReports implements Format {
  readonly name: string;
  readonly size: number;
  constructor(readonly law: Law, readonly sizes: number[], readonly memo: Memo | null = null) {
    this.name = law.kind;
    this.size = law.size;
  }

  encode(values: number[]): number {
    return ravel(values, this.sizes);
  }

  perturb(draws: Draws, x: Input): Payload {
    if (this.memo === null) return fresh(draws, this.law, x as number);
    return this.instantaneous(draws, this.permanent(draws, x));
  }

  permanent(draws: Draws, x: Input): Payload {
    if (this.memo === null) throw new DPMarginalsError("the plan does not memoize");
    return fresh(draws, this.memo.permanent, x as number);
  }

  instantaneous(draws: Draws, permanent: Payload): Payload {
    if (this.memo === null) throw new DPMarginalsError("the plan does not memoize");
    const inst = this.memo.instantaneous;
    if (this.law.kind === "grr") return draws.keepOrUniform(permanent as number, inst, this.size);
    const perm = unaryBytes(permanent as string, this.size, this.name) as Uint8Array;
    const noise = draws.bits(rat(BigInt(inst), WORD_N), this.size);
    for (let i = 0; i < noise.length; i++) noise[i]! ^= perm[i]!;
    return base64(noise);
  }

  invalid(payload: Json): string | null {
    if (this.law.kind === "grr") {
      if (!isPayloadInt(payload)) return `grr payload must be an integer, got ${cut(pyr(payload), 60)}`;
      return payload >= 0 && payload < this.size ? null
        : `grr payload ${payload} is outside 0..${this.size - 1}`;
    }
    const raw = unaryBytes(payload, this.size, this.name);
    return typeof raw === "string" ? raw : null;
  }
}

// -- the signed-index formats: ht and cms --------------------------------------------------
abstract class SignedIndex implements Format {
  abstract readonly name: string;
  abstract readonly K: number;
  private keepCache = -1;
  constructor(readonly epsilon: number) {}

  get size(): number {
    return 2 * this.K;
  }

  get keep(): number {
    if (this.keepCache < 0) this.keepCache = binaryKeep(fromNumber(this.epsilon));
    return this.keepCache;
  }

  abstract encode(values: number[]): Input;
  abstract trueBit(x: Input, index: number): number;

  perturb(draws: Draws, x: Input): Payload {
    const i = draws.uniform(this.K);
    const kept = draws.coin(this.keep);
    return [i, this.trueBit(x, i) ^ (kept ? 0 : 1)];
  }
}

function comb(n: number, k: number): bigint {
  if (k < 0 || k > n) return 0n;
  let out = 1n;
  for (let j = 0; j < k; j++) out = (out * BigInt(n - j)) / BigInt(j + 1);
  return out;
}

function combinations(n: number, k: number, visit: (picked: number[]) => void): void {
  const picked: number[] = [];
  const walk = (start: number) => {
    if (picked.length === k) { visit(picked); return; }
    for (let i = start; i <= n - (k - picked.length); i++) {
      picked.push(i);
      walk(i + 1);
      picked.pop();
    }
  };
  walk(0);
}

/** `ht`: one Hadamard coefficient of the binary code (InpHT/FT, MargHT). */
export class HadamardCoefficients extends SignedIndex {
  readonly name = "ht";
  readonly K: number;
  readonly bits: number[];
  private maskCache: Float64Array | BigUint64Array | null = null;

  constructor(epsilon: number, readonly sizes: number[], readonly k: number,
              readonly support: string) {
    super(epsilon);
    if (support !== "bits" && support !== "attributes") {
      throw new DPMarginalsError(`plan params.support must be one of ['bits', 'attributes'], got ${pyr(support)}`);
    }
    this.bits = sizes.map(bitsFor);
    const total = this.bits.reduce((a, b) => a + b, 0);
    if (total > MAX_CODE_BITS) {
      throw new DPMarginalsError(`ht codes have at most ${MAX_CODE_BITS} bits, got ${total}`);
    }
    const count = this.count();
    this.K = count > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(count);
  }

  private top(): number {
    return [...this.bits].sort((a, b) => b - a).slice(0, this.k).reduce((a, b) => a + b, 0);
  }

  /** |T| without enumerating it. */
  private count(): bigint {
    const total = this.bits.reduce((a, b) => a + b, 0);
    if (this.support === "bits") {
      let out = 0n;
      for (let s = 1; s <= this.top(); s++) out += comb(total, s);
      return out;
    }
    // the sums of more attributes than there are are 0 (a plan's k may be 1e9)
    const k = Math.min(this.k, this.bits.length);
    const e = [1n, ...new Array<bigint>(k).fill(0n)];
    for (const b of this.bits) {
      for (let j = k; j >= 1; j--) e[j]! += e[j - 1]! * ((1n << BigInt(b)) - 1n);
    }
    return e.slice(1).reduce((a, b) => a + b, 0n);
  }

  /** T: the sorted coefficient masks (built on first use). */
  masks(): Float64Array | BigUint64Array {
    if (this.maskCache) return this.maskCache;
    const total = this.bits.reduce((a, b) => a + b, 0);
    const offsets = this.bits.map((_, j) => this.bits.slice(0, j).reduce((a, b) => a + b, 0));
    const wide = this.bits.flatMap((b, j) => (b ? [j] : []));
    const out: bigint[] = [];
    const full = this.support === "bits" ? this.top() >= total : this.k >= wide.length;
    if (full) {
      for (let m = 1n; m < 1n << BigInt(total); m++) out.push(m);
    } else if (this.support === "bits") {
      for (let s = 1; s <= this.top(); s++) {
        combinations(total, s, (picked) => out.push(picked.reduce((a, i) => a | (1n << BigInt(i)), 0n)));
      }
    } else {
      for (let s = 1; s <= Math.min(this.k, wide.length); s++) {
        combinations(wide.length, s, (picked) => {
          let partial = [0n];
          for (const w of picked) {
            const attr = wide[w]!;
            const next: bigint[] = [];
            for (const p of partial) {
              for (let m = 1n; m < 1n << BigInt(this.bits[attr]!); m++) next.push(p + (m << BigInt(offsets[attr]!)));
            }
            partial = next;
          }
          out.push(...partial);
        });
      }
    }
    const sorted = BigUint64Array.from(out).sort();
    this.maskCache = total <= 32 ? Float64Array.from(sorted, Number) : sorted;
    return this.maskCache;
  }

  /** The binary code: attribute j's value at bit offset bits[0] + ... + bits[j-1]. */
  encode(values: number[]): bigint {
    let code = 0n;
    let offset = 0n;
    for (let j = 0; j < values.length; j++) {
      if (this.bits[j]) code |= BigInt(values[j]!) << offset;
      offset += BigInt(this.bits[j]!);
    }
    return code;
  }

  trueBit(x: Input, index: number): number {
    const mask = this.masks()[index]!;
    if (typeof mask === "number") return popcount((mask & Number(x)) >>> 0) & 1;
    return parityOf(mask & (x as bigint));
  }
}

/** `cms`: Apple's Hadamard count-mean sketch of the cell (InpHTCMS). */
export class CountMeanSketch extends SignedIndex {
  readonly name = "cms";
  readonly K: number;
  readonly g: number;

  readonly coefficients: bigint[][];

  constructor(epsilon: number, readonly sizes: number[], readonly w: number, rows: Json[][]) {
    super(epsilon);
    if (w < 2 || !Number.isInteger(Math.log2(w))) {
      throw new DPMarginalsError(`plan params.w must be a power of two >= 2, got ${w}`);
    }
    const cells = sizes.reduce((a, b) => a * b, 1);
    if (cells >= PRIME) {
      throw new DPMarginalsError(`cms hashes cells below ${PRIME}; the group has ${cells}`);
    }
    const bad = rows.length !== 3 || !rows[0]!.length
      || rows.some((r) => r.length !== rows[0]!.length)
      || rows.some((r) => r.some((c, j) => !isInt(r, j) || BigInt(c as number) < 0n
                                  || BigInt(c as number) >= BigInt(PRIME)));
    if (bad) {
      throw new DPMarginalsError(`plan params.hash_coefficients must be 3 lists of g integers in `
                                 + `[0, ${PRIME}), got ${cut(pyr(rows), 120)}`);
    }
    this.coefficients = rows.map((r) => r.map((c) => BigInt(c as number)));
    this.g = rows[0]!.length;
    this.K = this.g * w;
  }

  encode(values: number[]): number {
    return ravel(values, this.sizes);
  }

  /** h_j(x) = ((a x^2 + b x + c) mod P) mod w, as Python computes it. */
  hash(j: number, x: number): number {
    const p = BigInt(PRIME);
    const xb = BigInt(x);
    const [a, b, c] = [this.coefficients[0]![j]!, this.coefficients[1]![j]!, this.coefficients[2]![j]!];
    let t = (a * xb) % p;
    t = (t * xb + ((b * xb) % p) + c) % p;
    return Number(t % BigInt(this.w));
  }

  trueBit(x: Input, index: number): number {
    const j = Math.floor(index / this.w);
    const l = index % this.w;
    return popcount(l & this.hash(j, x as number)) & 1;
  }
}

// -- em: every attribute at eps/d -----------------------------------------------------------
type EmLaw = GrrLaw | UnaryLaw | null;

export class AttributeReports implements Format {
  readonly name = "em";
  readonly size: number;
  readonly classes: bigint[];
  private lawCache: { fresh: EmLaw[]; memo: (Memo | null)[] } | null = null;

  constructor(readonly epsilon: number, readonly sizes: number[], readonly oracles: string[],
              readonly k: number, readonly longitudinal: number | null) {
    const d = sizes.length;
    if (oracles.length !== d || oracles.some((o) => o !== "none" && !MEMOIZED.includes(o as "grr"))) {
      throw new DPMarginalsError(`plan params.attribute_oracles must name ${d} oracles of ['grr', `
                                 + `'oue', 'sue'] (or 'none'), got ${cut(pyr(oracles), 120)}`);
    }
    oracles.forEach((o, j) => {
      const c = sizes[j]!;
      if ((o === "none") !== (c < 2)) {
        throw new DPMarginalsError(`an attribute of ${c} values cannot report with oracle ${pyr(o)}`);
      }
      if ((o === "oue" || o === "sue") && c > MAX_CODE_BITS) {
        throw new DPMarginalsError(`a unary report of ${c} bits does not fit one class integer`);
      }
    });
    if (!(k >= 1 && k <= d)) throw new DPMarginalsError(`plan params.k must be in 1..${d}, got ${k}`);
    this.classes = oracles.map((o, j) => (o === "none" ? 1n : o === "grr" ? BigInt(sizes[j]!)
      : 1n << BigInt(sizes[j]!)));
    let size = 0n;
    combinations(d, k, (picked) => {
      size += picked.reduce((a, i) => a * this.classes[i]!, 1n);
    });
    this.size = size > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(size);
  }

  /** Each attribute's budget, exactly eps / d (and longitudinal / d). */
  private laws(): { fresh: EmLaw[]; memo: (Memo | null)[] } {
    if (this.lawCache) return this.lawCache;
    const d = BigInt(this.sizes.length);
    const eps = fromNumber(this.epsilon);
    const share = rat(eps.n, eps.d * d);
    const fresh: EmLaw[] = [];
    const memo: (Memo | null)[] = [];
    if (this.longitudinal === null) {
      this.oracles.forEach((o, j) => {
        fresh.push(o === "none" ? null : o === "grr" ? grrLaw(share, this.sizes[j]!)
          : unaryLaw(o as "oue" | "sue", share, this.sizes[j]!));
      });
    } else {
      const l = fromNumber(this.longitudinal);
      const perm = rat(l.n, l.d * d);
      this.oracles.forEach((o, j) => {
        memo.push(o === "none" ? null : memoLaw(o, share, perm, this.sizes[j]!));
      });
    }
    return (this.lawCache = { fresh, memo });
  }

  encode(values: number[]): number[] {
    return values.slice();
  }

  private each(values: number[], laws: EmLaw[], draws: Draws): Payload {
    return laws.map((law, j) => {
      if (law === null) return 0;
      const v = values[j]!;
      if (!(v >= 0 && v < law.size)) {
        throw new DPMarginalsError(`em value of attribute ${j}: value ${v} at index 0 is outside `
                                   + `0..${law.size - 1}`);
      }
      if (law.kind === "grr") return draws.keepOrUniform(v, law.keep, law.size);
      return classOf(unaryReport(draws, law, v));
    });
  }

  perturb(draws: Draws, x: Input): Payload {
    if (this.longitudinal !== null) return this.instantaneous(draws, this.permanent(draws, x));
    return this.each(x as number[], this.laws().fresh, draws);
  }

  permanent(draws: Draws, x: Input): Payload {
    if (this.longitudinal === null) throw new DPMarginalsError("the plan does not memoize");
    return this.each(x as number[], this.laws().memo.map((m) => (m ? m.permanent : null)), draws);
  }

  instantaneous(draws: Draws, permanent: Payload): Payload {
    if (this.longitudinal === null) throw new DPMarginalsError("the plan does not memoize");
    const perm = permanent as (number | bigint)[];
    return this.laws().memo.map((m, j) => {
      if (m === null) return 0;
      const c = m.permanent.size;
      if (m.permanent.kind === "grr") return draws.keepOrUniform(Number(perm[j]), m.instantaneous, c);
      const noise = draws.bits(rat(BigInt(m.instantaneous), WORD_N), c);
      const cls = BigInt(perm[j]!);
      for (let i = 0; i < noise.length; i++) noise[i]! ^= Number((cls >> BigInt(8 * i)) & 0xffn);
      return classOf(noise);
    });
  }

  invalid(payload: Json): string | null {
    if (!Array.isArray(payload) || payload.length !== this.classes.length
        || !payload.every((y, j) => isPayloadInt(y) && !floatAt(payload, j))) {
      return `em payload must be ${this.classes.length} integers (one reported class per `
        + `attribute), got ${cut(pyr(payload), 60)}`;
    }
    for (let j = 0; j < payload.length; j++) {
      const y = BigInt(payload[j] as number | bigint);
      if (y < 0n || y >= this.classes[j]!) {
        return `em class ${y} of attribute ${j} is outside 0..${this.classes[j]! - 1n}`;
      }
    }
    return null;
  }
}

/** Packed bits read as a little-endian integer (exact beyond 2^53: a BigInt). */
function classOf(bytes: Uint8Array): number | bigint {
  let out = 0n;
  for (let i = bytes.length - 1; i >= 0; i--) out = (out << 8n) | BigInt(bytes[i]!);
  return out <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(out) : out;
}

// -- matrix: one output of a public strategy (WFM) -------------------------------------------
export class StrategyMatrix implements Format {
  readonly name = "matrix";
  readonly size: number;
  private readonly cumulative: BigUint64Array; // column-major: cumulative[x * m + o]

  constructor(readonly epsilon: number, weights: BigUint64Array, rows: number,
              readonly sizes: number[]) {
    const cells = sizes.reduce((a, b) => a * b, 1);
    this.size = rows;
    const bound = expLowerBound(fromNumber(epsilon)); // LB = bound / 2^128
    this.cumulative = new BigUint64Array(rows * cells);
    for (let x = 0; x < cells; x++) {
      let total = 0n;
      for (let o = 0; o < rows; o++) {
        total += weights[o * cells + x]!;
        this.cumulative[x * rows + o] = total > STRATEGY_TOTAL ? STRATEGY_TOTAL : total;
      }
      if (total !== STRATEGY_TOTAL) {
        throw new DPMarginalsError(`column ${x} of the strategy sums to ${total}, not 2^63: it is `
                                   + "not a distribution");
      }
    }
    for (let o = 0; o < rows; o++) {
      let lo = weights[o * cells]!;
      let hi = lo;
      for (let x = 1; x < cells; x++) {
        const w = weights[o * cells + x]!;
        if (w < lo) lo = w;
        if (w > hi) hi = w;
      }
      if (hi > 0n && hi << 128n > lo * bound) {
        const ratio = lo === 0n ? "inf" : pyRepr(toNumber(rat(hi, lo)));
        throw new DPMarginalsError(`the strategy matrix is not ${pyRepr(epsilon)}-LDP: row ${o} `
                                   + `has max/min = ${ratio} > e^eps = ${pyRepr(Math.exp(epsilon))}`);
      }
    }
  }

  encode(values: number[]): number {
    return ravel(values, this.sizes);
  }

  /** u = uniform63; the first row whose cumulative weight in column x exceeds u. */
  perturb(draws: Draws, x: Input): Payload {
    const u = draws.uniform63();
    const base = (x as number) * this.size;
    let lo = 0;
    let hi = this.size; // the number of rows whose cumulative weight is <= u
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.cumulative[base + mid]! <= u) lo = mid + 1; else hi = mid;
    }
    return lo;
  }
}

function strategySpec(spec: Json | undefined, columns: number): [number, string[]] {
  if (isObject(spec) && "float64" in spec) {
    throw new DPMarginalsError("plan params.strategy holds float64 weights (a version 1 plan): a "
                               + "device samples integer weights only; plan again");
  }
  const keys = isObject(spec) ? Object.keys(spec).sort().join() : "";
  if (!isObject(spec) || keys !== "columns,rows,uint64") {
    throw new DPMarginalsError('plan params.strategy must be {"rows", "columns", "uint64"}, got '
                               + pyr(cut(JSON.stringify(spec) ?? "None", 80)));
  }
  for (const key of ["rows", "columns"]) {
    if (!isInt(spec, key) || Number(spec[key]) < 1) {
      throw new DPMarginalsError(`plan params.strategy.${key} must be an integer >= 1, got `
                                 + pyr(spec[key], floatAt(spec, key)));
    }
  }
  const rows = Number(spec["rows"]);
  const cols = Number(spec["columns"]);
  if (cols !== columns) {
    throw new DPMarginalsError(`plan params.strategy has ${cols} columns but the group's marginal `
                               + `has ${columns} cells`);
  }
  if (rows * cols > MAX_STRATEGY_ENTRIES) {
    throw new DPMarginalsError(`plan params.strategy has ${rows} x ${cols} = ${rows * cols} `
                               + `entries; at most ${MAX_STRATEGY_ENTRIES}`);
  }
  const chunks = Math.ceil((8 * rows * cols) / STRATEGY_CHUNK);
  const text = spec["uint64"];
  if (!Array.isArray(text) || text.length !== chunks || !text.every((t) => typeof t === "string")) {
    throw new DPMarginalsError(`plan params.strategy.uint64 must be ${chunks} base64 strings (the `
                               + `${rows} x ${cols} uint64 weights, ${STRATEGY_CHUNK} bytes a string)`);
  }
  return [rows, text as string[]];
}

function decodeChunks(chunks: string[], rows: number, columns: number): BigUint64Array {
  const parts: Uint8Array[] = [];
  chunks.forEach((text, i) => {
    if (text.length > STRATEGY_TEXT) {
      throw new DPMarginalsError(`plan params.strategy.uint64[${i}] is a string of ${text.length} `
                                 + `characters; at most ${STRATEGY_TEXT}`);
    }
    const part = unbase64(text);
    if (part === null) throw new DPMarginalsError(`plan params.strategy.uint64[${i}] is not valid base64`);
    if ((part.length !== STRATEGY_CHUNK && i !== chunks.length - 1) || !part.length) {
      throw new DPMarginalsError(`plan params.strategy.uint64[${i}] holds ${part.length} bytes; `
                                 + `every string but the last holds ${STRATEGY_CHUNK}`);
    }
    parts.push(part);
  });
  const total = parts.reduce((a, p) => a + p.length, 0);
  if (total !== 8 * rows * columns) {
    throw new DPMarginalsError(`plan params.strategy.uint64 holds ${total} bytes, not the `
                               + `${8 * rows * columns} of ${rows} x ${columns} uint64`);
  }
  const bytes = new Uint8Array(total);
  let at = 0;
  for (const p of parts) { bytes.set(p, at); at += p.length; }
  const view = new DataView(bytes.buffer);
  const out = new BigUint64Array(rows * columns);
  for (let i = 0; i < out.length; i++) out[i] = view.getBigUint64(8 * i, true);
  return out;
}

// -- a group's format from the plan -------------------------------------------------------
function intParam(plan: Plan, key: string, low: number): number {
  const value = plan.params[key];
  if (!isInt(plan.params, key) || Number(value) < low) {
    throw new DPMarginalsError(`plan params.${key} must be an integer >= ${low}, got `
                               + pyr(value, floatAt(plan.params, key)));
  }
  return Number(value);
}

function hashCoefficients(plan: Plan): Json[][] {
  const listed = plan.params["hash_coefficients"];
  if ((listed === undefined || listed === null) && plan.version === 1) {
    throw new DPMarginalsError("plan params.hash_coefficients is missing: this version 1 plan "
                               + "draws its sketch hashes from numpy's PCG64 (params.hash_seed), "
                               + "which only the Python client reproduces; plan again (version 2)");
  }
  if (!Array.isArray(listed) || !listed.every((r) => Array.isArray(r))) {
    throw new DPMarginalsError("plan params.hash_coefficients must be 3 lists of integers, got "
                               + pyr(cut(JSON.stringify(listed) ?? "None", 80)));
  }
  return listed as Json[][];
}

const formatCache = new Map<string, Format[]>(); // by plan hash: a plan read again reuses them

/** Group g's report format, from the plan alone (formats.group_oracle). */
export function groupFormat(plan: Plan, g: number): Format {
  let cached = formatCache.get(plan.hash);
  if (!cached) {
    if (formatCache.size >= 16) formatCache.delete(formatCache.keys().next().value!);
    formatCache.set(plan.hash, (cached = []));
  }
  if (cached[g]) return cached[g]!;
  const spec = plan.groups[g]!;
  const sizes = spec.attributes.map((a) => plan.domain.size(a));
  const longitudinal = plan.longitudinal;
  const eps = fromNumber(spec.epsilon);
  if (longitudinal !== null && ![...MEMOIZED, "em"].includes(spec.oracle as "em")) {
    throw new DPMarginalsError(`groups[${g}].oracle = ${pyr(spec.oracle)} cannot be memoized `
                               + `(longitudinal_epsilon = ${pyRepr(longitudinal)}): only ['grr', `
                               + "'oue', 'sue', 'em'] can; plan without longitudinal_epsilon");
  }
  let out: Format;
  if ((ORACLES as readonly string[]).includes(spec.oracle)) {
    if (longitudinal === null) out = new CellReports(lawOf(spec.oracle, eps, spec.cells), sizes);
    else {
      const memo = memoLaw(spec.oracle, eps, fromNumber(longitudinal), spec.cells);
      out = new CellReports(lawOf(spec.oracle, eps, spec.cells), sizes, memo);
    }
  } else if (spec.oracle === "ht") {
    const support = plan.params["support"] === undefined ? "attributes" : plan.params["support"];
    out = new HadamardCoefficients(spec.epsilon, sizes, intParam(plan, "k", 1), support as string);
  } else if (spec.oracle === "cms") {
    out = new CountMeanSketch(spec.epsilon, sizes, intParam(plan, "w", 2), hashCoefficients(plan));
  } else if (spec.oracle === "em") {
    const names = plan.params["attribute_oracles"];
    if (!Array.isArray(names) || names.length !== plan.domain.length) {
      throw new DPMarginalsError("plan params.attribute_oracles must list one oracle per attribute, "
                                 + `got ${cut(pyr(names ?? null), 120)}`);
    }
    const chosen = spec.attributes.map((a) => {
      const name = names[plan.domain.index(a)];
      return typeof name === "string" ? name : pyr(name);
    });
    out = new AttributeReports(spec.epsilon, sizes, chosen, intParam(plan, "k", 1), longitudinal);
  } else if (spec.oracle === "matrix") {
    const [rows, chunks] = strategySpec(plan.params["strategy"], spec.cells);
    out = new StrategyMatrix(spec.epsilon, decodeChunks(chunks, rows, spec.cells), rows, sizes);
  } else {
    throw new DPMarginalsError(`oracle must be one of ${pyr(KNOWN)}, got ${pyr(spec.oracle)}`);
  }
  cached[g] = out;
  return out;
}
