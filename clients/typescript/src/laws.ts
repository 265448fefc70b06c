// The frequency oracles' laws as the device samples them (src/dpmarginals/oracles): every
// probability a 32-bit threshold over 2^32 (a memoized plan's: the product of two layers),
// derived from a budget by exact.ts, and checked as the Python oracles check them.
import { DPMarginalsError } from "./errors.js";
import {
  PRIME, type Rational, WORD, WORD_N, add, binaryKeep, cmp, distinctCollision, grrInstantaneous,
  grrKeep, mul, olhRange, rat, sub, toNumber, unaryInstantaneous, unaryQ,
} from "./exact.js";
import { pyRepr } from "./pyformat.js";

export const ORACLES = ["grr", "hr", "olh", "oue", "sue"] as const; // sorted
export const MEMOIZED = ["grr", "oue", "sue"] as const;

export interface GrrLaw { kind: "grr"; size: number; keep: number }
export interface UnaryLaw { kind: "oue" | "sue"; size: number; p: number; q: number } // over 2^32
export interface OlhLaw { kind: "olh"; size: number; g: number; keep: number }
export interface HrLaw { kind: "hr"; size: number; K: number; p: number }
export type Law = GrrLaw | UnaryLaw | OlhLaw | HrLaw;

/** A memoized oracle: the permanent law and the instantaneous threshold (GRR: a word below
 *  it keeps the permanent value; unary: a word below it flips a bit). */
export interface Memo { permanent: GrrLaw | UnaryLaw; instantaneous: number }

const ONE: Rational = { n: 1n, d: 1n };

/** Raise unless 0 <= q < p <= 1 (src/dpmarginals/oracles/_base.py check_law). */
export function checkLaw(p: Rational, q: Rational, eps: Rational, name: string): void {
  if (!(q.n >= 0n && cmp(q, p) < 0 && cmp(p, ONE) <= 0)) {
    throw new DPMarginalsError(`${name}: epsilon = ${pyRepr(toNumber(eps))} is too small for `
                               + `32-bit randomizers (p = ${pyRepr(toNumber(p))}, q = `
                               + `${pyRepr(toNumber(q))})`);
  }
}

function grrPQ(beta: Rational, size: number): [Rational, Rational] {
  const q = rat(beta.d - beta.n, beta.d * BigInt(size));
  const p = rat(beta.n * BigInt(size) + beta.d - beta.n, beta.d * BigInt(size));
  return [p, q];
}

export function grrLaw(eps: Rational, size: number): GrrLaw {
  const keep = grrKeep(eps, size);
  const [p, q] = grrPQ(rat(BigInt(keep), WORD_N), size);
  checkLaw(p, q, eps, "grr");
  return { kind: "grr", size, keep };
}

export function unaryLaw(kind: "oue" | "sue", eps: Rational, size: number): UnaryLaw {
  const q = unaryQ(eps, kind === "sue");
  const p = kind === "sue" ? WORD - q : WORD / 2;
  checkLaw(rat(BigInt(p), WORD_N), rat(BigInt(q), WORD_N), eps, kind);
  return { kind, size, p, q };
}

export function olhLaw(eps: Rational, size: number): OlhLaw {
  if (size >= PRIME) throw new DPMarginalsError(`size must be < ${PRIME} for OLH, got ${size}`);
  const g = olhRange(eps);
  const keep = grrKeep(eps, g);
  const [pg, qg] = grrPQ(rat(BigInt(keep), WORD_N), g);
  const c = distinctCollision(g);
  const q = add(qg, mul(c, sub(pg, qg)));
  checkLaw(pg, q, eps, "olh");
  return { kind: "olh", size, g, keep };
}

export function hrLaw(eps: Rational, size: number): HrLaw {
  return { kind: "hr", size, K: 2 ** (32 - Math.clz32(size)), p: binaryKeep(eps) };
}

const cache = new Map<string, Law | Memo>();

function cached<T extends Law | Memo>(key: string, make: () => T): T {
  let out = cache.get(key) as T | undefined;
  if (out === undefined) {
    out = make();
    if (cache.size > 4096) cache.clear();
    cache.set(key, out);
  }
  return out;
}

/** The oracle `name` at the exact budget `eps` (make_oracle / oracle_at), cached. */
export function lawOf(name: string, eps: Rational, size: number): Law {
  return cached(`${name}|${eps.n}/${eps.d}|${size}`, () => makeLaw(name, eps, size));
}

function makeLaw(name: string, eps: Rational, size: number): Law {
  if (!Number.isInteger(size) || size < 2) {
    throw new DPMarginalsError(`size must be an integer >= 2, got ${size}`);
  }
  switch (name) {
    case "grr": return grrLaw(eps, size);
    case "oue": case "sue": return unaryLaw(name, eps, size);
    case "olh": return olhLaw(eps, size);
    case "hr": return hrLaw(eps, size);
    default:
      throw new DPMarginalsError(`oracle must be one of ${ORACLES}, got ${name}`);
  }
}

/** (permanent law, instantaneous threshold) of a memoized oracle, after checking the
 *  composed law at the per-report budget (src/dpmarginals/oracles/memoized.py). */
export function memoLaw(name: string, eps: Rational, longitudinal: Rational, size: number): Memo {
  return cached(`${name}|${eps.n}/${eps.d}|${longitudinal.n}/${longitudinal.d}|${size}`,
                () => makeMemo(name, eps, longitudinal, size));
}

function makeMemo(name: string, eps: Rational, longitudinal: Rational, size: number): Memo {
  if (!(MEMOIZED as readonly string[]).includes(name)) {
    throw new DPMarginalsError(`oracle '${name}' cannot be memoized (only ['grr', 'oue', 'sue'])`);
  }
  if (cmp(longitudinal, eps) < 0) {
    throw new DPMarginalsError(`the longitudinal epsilon ${pyRepr(toNumber(longitudinal))} must be `
                               + `at least the per-report epsilon ${pyRepr(toNumber(eps))}`);
  }
  if (name === "grr") {
    const permanent = grrLaw(longitudinal, size);
    const inst = grrInstantaneous(eps, permanent.keep, size);
    const [p, q] = grrPQ(rat(BigInt(permanent.keep) * BigInt(inst), 1n << 64n), size);
    checkLaw(p, q, eps, "grr");
    return { permanent, instantaneous: inst };
  }
  const permanent = unaryLaw(name as "oue" | "sue", longitudinal, size);
  const [flip, qn] = unaryInstantaneous(eps, permanent.q, name === "sue");
  const q = rat(qn, 1n << 64n);
  checkLaw(name === "sue" ? sub(ONE, q) : rat(1n, 2n), q, eps, name);
  return { permanent, instantaneous: flip };
}

/** The composed (p, q) the aggregator unbiases with: the law's own, or a memoized law's
 *  composition of its two layers. */
export function composedLaw(law: Law, memo: Memo | null): [Rational, Rational] {
  if (memo === null) {
    switch (law.kind) {
      case "grr": return grrPQ(rat(BigInt(law.keep), WORD_N), law.size);
      case "oue": case "sue": return [rat(BigInt(law.p), WORD_N), rat(BigInt(law.q), WORD_N)];
      case "hr": return [rat(BigInt(law.p), WORD_N), rat(1n, 2n)];
      case "olh": {
        const [pg, qg] = grrPQ(rat(BigInt(law.keep), WORD_N), law.g);
        return [pg, add(qg, mul(distinctCollision(law.g), sub(pg, qg)))];
      }
    }
  }
  const perm = memo.permanent;
  if (perm.kind === "grr") {
    return grrPQ(rat(BigInt(perm.keep) * BigInt(memo.instantaneous), 1n << 64n), perm.size);
  }
  const q1 = BigInt(perm.q);
  const q = rat(q1 * WORD_N + BigInt(memo.instantaneous) * (WORD_N - 2n * q1), 1n << 64n);
  return [perm.kind === "sue" ? sub(ONE, q) : rat(1n, 2n), q];
}
