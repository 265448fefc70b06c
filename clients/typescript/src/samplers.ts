// The device's random choices, each an exact function of uniform 32-bit words, in the
// order docs/device-spec.md §3 states (src/dpmarginals/protocol/samplers.py): coin,
// Lemire's uniform, keep_or_uniform (GRR), the exact byte sampler (Bernoulli bits by the
// inverse of their exact CDF), uniform63.  The formats draw only through `Draws`, so the
// tests can replace the primitives by choice points over their declared laws.
import { DPMarginalsError } from "./errors.js";
import { type Rational, WORD, rat } from "./exact.js";

/** Uniform 32-bit words (the OS CSPRNG on a device; a replayed stream in the tests). */
export interface WordSource {
  word(): number;
}

/** The primitives every format draws through. */
export interface Draws {
  /** true w.p. t / 2^32 */
  coin(t: number): boolean;
  /** uniform on [0, n), 1 <= n <= 2^32 */
  uniform(n: number): number;
  /** x w.p. keep / 2^32, else uniform over all `size` values */
  keepOrUniform(x: number, keep: number, size: number): number;
  /** ceil(size / 8) bytes of independent Bernoulli(q) bits, the bits past `size` 0 */
  bits(q: Rational, size: number): Uint8Array;
  /** uniform on [0, 2^63) */
  uniform63(): bigint;
}

const CELL = 65536;

/** A byte of 8 independent Bernoulli(q) bits: the tables of its exact inverse CDF. */
export class ByteSampler {
  readonly cdf: bigint[]; // cdf[v] = num[v] / den, v = 0..256
  readonly den: bigint;
  readonly clean: number;
  readonly table: Uint8Array;
  readonly straddling: Int32Array;
  readonly fineFirst: Float64Array;
  readonly fineEnd: Float64Array;

  constructor(q: Rational) {
    if (q.n < 0n || q.n > q.d) throw new DPMarginalsError(`a bit probability lies in [0, 1]`);
    const weights: bigint[] = [];
    for (let k = 0; k <= 8; k++) weights.push(q.n ** BigInt(k) * (q.d - q.n) ** BigInt(8 - k));
    this.den = q.d ** 8n;
    const cdf = [0n];
    for (let v = 0; v < 256; v++) cdf.push(cdf[v]! + weights[popcount(v)]!);
    this.cdf = cdf;
    const ceilScaled = (c: bigint, bits: bigint) => Number(((c << bits) + this.den - 1n) / this.den);
    const floorScaled = (c: bigint, bits: bigint) => Number((c << bits) / this.den);
    const owner = new Int32Array(CELL).fill(-1);
    this.table = new Uint8Array(CELL);
    this.fineFirst = new Float64Array(256);
    this.fineEnd = new Float64Array(256);
    let clean = 0;
    for (let v = 0; v < 256; v++) {
      const first = ceilScaled(cdf[v]!, 16n);
      const end = floorScaled(cdf[v + 1]!, 16n);
      for (let c = first; c < end; c++) { owner[c] = v; this.table[clean++] = v; }
      this.fineFirst[v] = ceilScaled(cdf[v]!, 48n);
      this.fineEnd[v] = floorScaled(cdf[v + 1]!, 48n);
    }
    this.clean = clean;
    const straddling: number[] = [];
    for (let c = 0; c < CELL; c++) if (owner[c]! < 0) straddling.push(c);
    this.straddling = Int32Array.from(straddling);
  }

  /** `count` bytes from `src`: count 16-bit units, then a word per straddling byte, then
   *  the words of every byte still undecided, byte after byte. */
  sample(count: number, src: WordSource): Uint8Array {
    const out = new Uint8Array(count);
    const late: number[] = [];
    let w = 0;
    for (let i = 0; i < count; i++) {
      let unit: number;
      if (i & 1) unit = w >>> 16;
      else { w = src.word(); unit = w & 0xffff; }
      if (unit < this.clean) out[i] = this.table[unit]!;
      else late.push(i, unit - this.clean);
    }
    const open: number[] = [];
    for (let j = 0; j < late.length; j += 2) {
      const fine = this.straddling[late[j + 1]!]! * WORD + src.word();
      let lo = 0;
      let hi = 255; // the largest v with fineFirst[v] <= fine
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (this.fineFirst[mid]! <= fine) lo = mid; else hi = mid - 1;
      }
      out[late[j]!] = lo;
      if (fine >= this.fineEnd[lo]!) open.push(late[j]!, fine);
    }
    for (let j = 0; j < open.length; j += 2) out[open[j]!] = this.exact(open[j + 1]!, src);
    return out;
  }

  /** The value for U in [prefix, prefix + 1) / 2^48, reading 32 bits at a time. */
  private exact(fine: number, src: WordSource): number {
    let prefix = BigInt(fine);
    let bits = 48n;
    for (;;) {
      const scaledDen = this.den; // cdf[v] <= prefix / 2^bits  <=>  num[v] 2^bits <= prefix den
      let lo = 0;
      let hi = 256;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (this.cdf[mid]! << bits <= prefix * scaledDen) lo = mid; else hi = mid - 1;
      }
      if ((prefix + 1n) * this.den <= this.cdf[lo + 1]! << bits) return lo;
      prefix = (prefix << 32n) + BigInt(src.word());
      bits += 32n;
    }
  }
}

export function popcount(v: number): number {
  v = v - ((v >>> 1) & 0x55555555);
  v = (v & 0x33333333) + ((v >>> 2) & 0x33333333);
  return (((v + (v >>> 4)) & 0x0f0f0f0f) * 0x01010101) >>> 24;
}

const samplers = new Map<string, ByteSampler>();

export function byteSampler(q: Rational): ByteSampler {
  const r = rat(q.n, q.d);
  const key = `${r.n}/${r.d}`;
  let s = samplers.get(key);
  if (!s) {
    if (samplers.size >= 64) samplers.clear();
    samplers.set(key, (s = new ByteSampler(r)));
  }
  return s;
}

/** The primitives over a word source, in the specification's order. */
export class WordDraws implements Draws {
  constructor(private readonly src: WordSource) {}

  coin(t: number): boolean {
    return this.src.word() < t;
  }

  uniform(n: number): number {
    if (!(n >= 1 && n <= WORD)) throw new DPMarginalsError(`uniform draws need 1 <= n <= 2^32, got ${n}`);
    if (n <= 2 ** 21) {
      const reject = WORD % n;
      for (;;) {
        const m = this.src.word() * n; // < 2^53: exact
        if (m % WORD >= reject) return Math.floor(m / WORD);
      }
    }
    const span = BigInt(n);
    const reject = (1n << 32n) % span;
    for (;;) {
      const m = BigInt(this.src.word()) * span;
      if ((m & 0xffffffffn) >= reject) return Number(m >> 32n);
    }
  }

  keepOrUniform(x: number, keep: number, size: number): number {
    if (size > CELL) {
      const kept = this.coin(keep);
      const other = this.uniform(size);
      return kept ? x : other;
    }
    const w = this.src.word();
    const c = w & 0xffff;
    const h = w >>> 16;
    let index: number;
    if ((size & (size - 1)) === 0) index = h >>> (17 - bitLength(size));
    else {
      const s = h * size;
      index = Math.floor(s / CELL);
      if (s % CELL < CELL % size) index = this.uniform(size);
    }
    const whole = Math.floor(keep / CELL);
    const rest = keep % CELL;
    let kept = whole < CELL ? c < whole : true;
    if (rest && whole < CELL && c === whole) kept = this.coin(rest * CELL);
    return kept ? x : index;
  }

  bits(q: Rational, size: number): Uint8Array {
    const out = byteSampler(q).sample((size + 7) >> 3, this.src);
    if (size % 8) out[out.length - 1]! &= (1 << (size % 8)) - 1;
    return out;
  }

  uniform63(): bigint {
    const w0 = this.src.word();
    const w1 = this.src.word();
    return BigInt(w0) + (BigInt(w1 & 0x7fffffff) << 32n);
  }
}

/** The bits of n (< 2^32). */
export function bitLength(n: number): number {
  return 32 - Math.clz32(n);
}
