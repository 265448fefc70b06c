// Exact arithmetic behind every privacy bound (src/dpmarginals/core/exact.py and the
// oracles' thresholds): rationals of BigInts, a float's exact value, the rational lower
// bound LB(x) <= e^x, and the 32-bit thresholds found by binary search on exact
// inequalities (docs/device-spec.md §3).  Every client derives the same integers.
import { DPMarginalsError } from "./errors.js";

/** n / d with d > 0 (not necessarily in lowest terms). */
export interface Rational { readonly n: bigint; readonly d: bigint }

export const WORD = 4294967296; // 2^32
export const WORD_N = 1n << 32n;
export const PRIME = 2147483647; // 2^31 - 1, every hash family's modulus

function gcd(a: bigint, b: bigint): bigint {
  a = a < 0n ? -a : a;
  while (b) [a, b] = [b, a % b];
  return a;
}

export function rat(n: bigint, d = 1n): Rational {
  if (d < 0n) { n = -n; d = -d; }
  const g = gcd(n, d) || 1n;
  return { n: n / g, d: d / g };
}

/** The exact rational value of a finite double. */
export function fromNumber(x: number): Rational {
  if (!Number.isFinite(x)) throw new DPMarginalsError(`${x} is not a finite number`);
  if (Number.isSafeInteger(x)) return { n: BigInt(x), d: 1n };
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const hi = view.getUint32(0);
  const lo = view.getUint32(4);
  const biased = (hi >>> 20) & 0x7ff;
  let mant = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
  let e = -1074;
  if (biased) { mant |= 1n << 52n; e = biased - 1075; }
  if (hi >>> 31) mant = -mant;
  return e >= 0 ? { n: mant << BigInt(e), d: 1n } : rat(mant, 1n << BigInt(-e));
}

export const add = (a: Rational, b: Rational): Rational => rat(a.n * b.d + b.n * a.d, a.d * b.d);
export const sub = (a: Rational, b: Rational): Rational => rat(a.n * b.d - b.n * a.d, a.d * b.d);
export const mul = (a: Rational, b: Rational): Rational => rat(a.n * b.n, a.d * b.d);
export const cmp = (a: Rational, b: Rational): number => {
  const x = a.n * b.d;
  const y = b.n * a.d;
  return x < y ? -1 : x > y ? 1 : 0;
};
export const minR = (a: Rational, b: Rational): Rational => (cmp(a, b) <= 0 ? a : b);
export const ZERO: Rational = { n: 0n, d: 1n };

/** A rational as the nearest double (for messages). */
export function toNumber(r: Rational): number {
  const neg = r.n < 0n;
  let n = neg ? -r.n : r.n;
  let d = r.d;
  // scale so that the quotient has 64 significant bits, then let the FPU round once more
  const shift = BigInt(n.toString(2).length - d.toString(2).length - 64);
  if (shift > 0n) d <<= shift; else n <<= -shift;
  const q = Number(n / d) * 2 ** Number(shift);
  return neg ? -q : q;
}


const FIXED = 192n;
const KEPT = 128n;
const lbCache = new Map<string, bigint>();

/** LB(x) = B / 2^128 <= e^x (x >= 0; beyond 64, LB(64)): the Taylor sum in fixed point
 *  with 192 fractional bits, every term rounded down, truncated to 128.  Returns B. */
export function expLowerBound(x: Rational): bigint {
  if (x.n < 0n) throw new DPMarginalsError(`exp_lower_bound needs x >= 0, got ${x.n}/${x.d}`);
  const y = cmp(x, { n: 64n, d: 1n }) > 0 ? { n: 64n, d: 1n } : rat(x.n, x.d);
  const key = `${y.n}/${y.d}`;
  let out = lbCache.get(key);
  if (out === undefined) {
    let term = 1n << FIXED;
    let total = term;
    let k = 0n;
    while (term) {
      k += 1n;
      term = (term * y.n) / (y.d * k);
      total += term;
    }
    out = total >> (FIXED - KEPT);
    if (lbCache.size > 4096) lbCache.clear();
    lbCache.set(key, out);
  }
  return out;
}

/** The largest t in [low, high] with ok(t) (true up to a point, then false). */
export function largestInteger(low: number, high: number, ok: (t: number) => boolean): number {
  if (!ok(low)) throw new DPMarginalsError(`no integer in [${low}, ${high}] satisfies the bound`);
  while (low < high) {
    const mid = Math.floor((low + high + 1) / 2);
    if (ok(mid)) low = mid; else high = mid - 1;
  }
  return low;
}

/** The smallest t in [low, high] with ok(t) (false up to a point, then true). */
export function smallestInteger(low: number, high: number, ok: (t: number) => boolean): number {
  if (!ok(high)) throw new DPMarginalsError(`no integer in [${low}, ${high}] satisfies the bound`);
  while (low < high) {
    const mid = Math.floor((low + high) / 2);
    if (ok(mid)) high = mid; else low = mid + 1;
  }
  return low;
}

const ONE128 = 1n << 128n;

/** GRR on `size` values: the largest T in [0, 2^32] with T < 2^32 and
 *  T (L - 1) + 2^32 <= LB (2^32 - T). */
export function grrKeep(eps: Rational, size: number): number {
  const b = expLowerBound(eps);
  const l1 = BigInt(size - 1);
  return largestInteger(0, WORD, (t) => {
    const tb = BigInt(t);
    return t < WORD && (tb * l1 + WORD_N) * ONE128 <= b * (WORD_N - tb);
  });
}

/** Binary randomized response: the largest P in [2^31, 2^32 - 1] with P <= LB (2^32 - P). */
export function binaryKeep(eps: Rational): number {
  const b = expLowerBound(eps);
  return largestInteger(WORD / 2, WORD - 1, (t) => BigInt(t) * ONE128 <= b * (WORD_N - BigInt(t)));
}

/** The unary encodings' Q: the smallest in [1, 2^31] with 2^32 - Q <= LB Q (OUE) or
 *  (2^32 - Q)^2 <= LB Q^2 (SUE). */
export function unaryQ(eps: Rational, symmetric: boolean): number {
  const b = expLowerBound(eps);
  return smallestInteger(1, WORD / 2, (t) => {
    const tb = BigInt(t);
    const left = WORD_N - tb;
    return symmetric ? left * left * ONE128 <= b * tb * tb : left * ONE128 <= b * tb;
  });
}

/** OLH's hash range g = min(floor(LB + 1/2) + 1, 2^31 - 1). */
export function olhRange(eps: Rational): number {
  const g = Number((expLowerBound(eps) + (1n << 127n)) >> 128n) + 1;
  return Math.min(g, PRIME);
}

/** A memoized GRR's instantaneous keep threshold: the largest t in [0, 2^32] with
 *  beta = perm t / 2^64 < 1 and 1 + beta L / (1 - beta) <= LB(eps). */
export function grrInstantaneous(eps: Rational, perm: number, size: number): number {
  const b = expLowerBound(eps);
  const two64 = 1n << 64n;
  const p = BigInt(perm);
  const l1 = BigInt(size - 1);
  return largestInteger(0, WORD, (t) => {
    const beta = p * BigInt(t); // over 2^64
    return beta < two64 && (two64 + beta * l1) * ONE128 <= b * (two64 - beta);
  });
}

/** A memoized unary encoding's flip threshold: the smallest F in [0, 2^31] whose composed
 *  q = q1 + (F / 2^32)(1 - 2 q1) (p = 1/2, or 1 - q for SUE) meets the ratio at eps.
 *  Returns F and the composed q's numerator over 2^64. */
export function unaryInstantaneous(eps: Rational, q1: number, symmetric: boolean
): [number, bigint] {
  const b = expLowerBound(eps);
  const two64 = 1n << 64n;
  const qn = (t: number) => BigInt(q1) * WORD_N + BigInt(t) * (WORD_N - 2n * BigInt(q1));
  const flip = smallestInteger(0, WORD / 2, (t) => {
    const q = qn(t);
    const left = two64 - q;
    return symmetric ? left * left * ONE128 <= b * q * q : left * ONE128 <= b * q;
  });
  return [flip, qn(flip)];
}

/** The exact collision probability of two distinct residues mod P reduced mod w. */
export function distinctCollision(w: number): Rational {
  const m = BigInt(Math.floor(PRIME / w));
  const r = BigInt(PRIME % w);
  const wb = BigInt(w);
  const same = r * (m + 1n) * m + (wb - r) * m * (m - 1n);
  const p = BigInt(PRIME);
  return rat(same, p * (p - 1n));
}
