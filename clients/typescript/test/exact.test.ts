// Every format's implemented sampler has exactly its declared law, and that law is exactly
// eps-LDP: enumerated in BigInt rationals on small domains (tests/test_exact_samplers.py
// does the same in Python).  Two levels, each exact:
//
// 1. The primitives against their declared laws, on their random words: a coin is
//    [w < T]; Lemire's uniform(n) maps each value's block of words to it and rejects
//    exactly 2^32 mod n words per block; the GRR sampler over all 2^16 coin halves and all
//    2^16 index halves; the byte sampler's every straddling cell refined to its exact
//    inverse CDF (also on a boundary's 2^-48 cell, which must read on).
// 2. Every format (grr, oue, sue, olh, hr, ht, cms, em, the memoized layers of grr, oue,
//    sue, em; matrix through its weights): the production code runs with its primitives
//    replaced by choice points that take each outcome of the primitive's declared law in
//    turn; the law is the sum over paths of the product of the outcomes' probabilities.  It
//    must sum to 1, equal the law the aggregator unbiases with, and have
//    max_{y, x, x'} P[y | x] / P[y | x'] <= LB(eps) <= e^eps (the inequality exact).  OLH is
//    enumerated given 6 hash seeds (the seed's law does not depend on the value).
import assert from "node:assert/strict";
import { test } from "node:test";
import { parsePlan } from "../src/checks.js";
import {
  PRIME, type Rational, WORD, WORD_N, add, cmp, expLowerBound, fromNumber, mul, rat, sub,
} from "../src/exact.js";
import { CellReports, type Format, type Input, StrategyMatrix, groupFormat } from "../src/formats.js";
import { type JsonObject, stringify } from "../src/json.js";
import { type Law, type Memo, composedLaw, lawOf, memoLaw } from "../src/laws.js";
import { type Plan, readPlan } from "../src/plan.js";
import { ByteSampler, type Draws, WordDraws, popcount } from "../src/samplers.js";
import { WordStream, vectors } from "./helpers.js";

const ONE: Rational = { n: 1n, d: 1n };
const frac = (n: number | bigint, d: number | bigint = 1) => rat(BigInt(n), BigInt(d));

// -- 1. the primitives ------------------------------------------------------------------------
test("a coin is the word below its threshold", () => {
  for (const t of [0, 1, 2 ** 31, WORD - 1, WORD]) {
    for (const w of new Set([Math.max(t - 1, 0), Math.min(t, WORD - 1), 0, WORD - 1])) {
      assert.equal(new WordDraws(new WordStream([w])).coin(t), w < t);
    }
  }
});

function lemire(w: number, n: number): number | null {
  const m = BigInt(w) * BigInt(n);
  return m % WORD_N < WORD_N % BigInt(n) ? null : Number(m / WORD_N);
}

test("uniform is Lemire's exact map: each value gets floor(2^32 / n) words", () => {
  for (const n of [1, 2, 3, 5, 7, 10, 100, 1000, 65535, 2 ** 21, 2 ** 21 + 1, PRIME, WORD - 1, WORD]) {
    const words: number[] = [];
    for (let i = 0; i < 2000; i++) words.push(Math.floor(Math.random() * WORD));
    if (n <= 1000) {
      const W = BigInt(WORD);
      const N = BigInt(n);
      for (let j = 0n; j < N; j++) {
        const start = (j * W + N - 1n) / N;
        const first = (j * W + W % N + N - 1n) / N;
        const end = ((j + 1n) * W + N - 1n) / N;
        assert.equal(end - first, W / N); // accepted words per value: all equal
        words.push(Number(start), Number(first) - 1, Number(first), Number(end) - 1);
      }
    }
    for (const w of words) {
      if (w < 0 || w >= WORD) continue;
      const src = new WordStream([w, WORD - 1]); // a rejected word draws the next (accepted)
      const out = new WordDraws(src).uniform(n);
      assert.equal(src.used === 1 ? out : null, lemire(w, n), `n = ${n}, w = ${w}`);
    }
  }
});

test("GRR's one-word sampler has the exact law: P(kept) = keep / 2^32, each index floor(2^16 / L)", () => {
  for (const [eps, size] of [[1.0, 4], [1.0, 6], [0.5, 3], [3.0, 1000]] as const) {
    const law = lawOf("grr", fromNumber(eps), size);
    assert.equal(law.kind, "grr");
    const keep = (law as { keep: number }).keep;
    const whole = Math.floor(keep / 65536);
    const rest = keep % 65536;
    for (const [tieWord, tieKept] of [[0, rest > 0], [rest * 65536, false]] as const) {
      let kept = 0;
      for (let c = 0; c < 65536; c++) {
        const src = new WordStream([(c | (0xffff << 16)) >>> 0, tieWord]);
        const out = new WordDraws(src).keepOrUniform(0, keep, size);
        assert.equal(src.used, 1 + (c === whole && rest > 0 ? 1 : 0));
        if (c < whole) assert.equal(out, 0);
        else if (c > whole) assert.equal(out, size - 1);
        else assert.equal(out === 0, tieKept);
        if (out === 0) kept++;
      }
      assert.equal(kept, whole + (tieKept ? 1 : 0));
    }
    const counts = new Array<number>(size).fill(0);
    const biased = 65536 % size;
    let redraws = 0;
    for (let h = 0; h < 65536; h++) {
      const src = new WordStream([(0xffff | (h << 16)) >>> 0, WORD - 1]);
      counts[new WordDraws(src).keepOrUniform(0, keep, size)]! += 1;
      redraws += src.used - 1;
    }
    assert.equal(redraws, (size & (size - 1)) === 0 ? 0 : biased);
    const expect = new Array<number>(size).fill(Math.floor(65536 / size));
    if ((size & (size - 1)) !== 0) expect[size - 1]! += biased; // the redraw word 2^32 - 1 gives L - 1
    assert.deepEqual(counts, expect);
  }
});

test("the byte sampler is the exact inverse CDF of 8 Bernoulli(q) bits", () => {
  for (const q of [frac(1, 4), frac(1155802661, WORD), frac(1, 2 ** 20), frac(1, 2)]) {
    const s = new ByteSampler(q);
    const cdf = (v: number): Rational => rat(s.cdf[v]!, s.den);
    for (let v = 0; v < 256; v++) {
      const k = popcount(v);
      const want = mul(rat(q.n ** BigInt(k), q.d ** BigInt(k)),
                       rat((q.d - q.n) ** BigInt(8 - k), q.d ** BigInt(8 - k)));
      assert.equal(cmp(sub(cdf(v + 1), cdf(v)), want), 0);
    }
    assert.equal(cmp(cdf(256), ONE), 0);
    const isStraddling = new Set(s.straddling);
    const order: number[] = [];
    for (let c = 0; c < 65536; c++) if (!isStraddling.has(c)) order.push(c);
    order.push(...s.straddling);
    const cases: number[][] = [];
    for (let i = 0; i < 300; i++) cases.push([Math.floor(Math.random() * s.clean)]);
    const rnd = () => Math.floor(Math.random() * WORD);
    for (let i = s.clean; i < 65536; i++) {
      const cell = order[i]!;
      cases.push([i, rnd(), rnd()]);
      for (let v = 1; v < 256; v++) { // a boundary inside this cell: land on its 2^-48 cell
        const fine = (s.cdf[v]! << 48n) / s.den;
        if (fine >> 32n === BigInt(cell)) cases.push([i, Number(fine - (BigInt(cell) << 32n)), rnd(), rnd()]);
      }
    }
    for (const units of cases) {
      const src = new WordStream(units);
      const value = s.sample(1, src)[0]!;
      let low = frac(order[units[0]!]!, 65536);
      let scale = frac(1, 65536);
      for (const w of units.slice(1, src.used)) {
        scale = mul(scale, frac(1, WORD));
        low = add(low, mul(frac(w), scale));
      }
      assert.ok(cmp(cdf(value), low) <= 0 && cmp(add(low, scale), cdf(value + 1)) <= 0);
    }
  }
});

test("uniform63 takes the low 31 bits of the second word", () => {
  assert.equal(new WordDraws(new WordStream([5, 0xffffffff])).uniform63(), 5n + ((2n ** 31n - 1n) << 32n));
});

// -- 2. every format, enumerated ------------------------------------------------------------
/** Depth-first enumeration of the choice points of one run. */
class Chooser implements Draws {
  path: number[] = [];
  widths: number[] = [];
  at = 0;
  prob: Rational = ONE;

  choose<T>(options: [T, Rational][]): T {
    if (this.at === this.path.length) { this.path.push(0); this.widths.push(options.length); }
    const [value, p] = options[this.path[this.at]!]!;
    this.at++;
    this.prob = { n: this.prob.n * p.n, d: this.prob.d * p.d }; // reduced once per path
    return value;
  }

  next(): boolean {
    while (this.path.length) {
      this.path[this.path.length - 1]! += 1;
      if (this.path[this.path.length - 1]! < this.widths[this.widths.length - 1]!) break;
      this.path.pop();
      this.widths.pop();
    }
    this.at = 0;
    this.prob = ONE;
    return this.path.length > 0;
  }

  coin(t: number): boolean {
    const p = frac(t, WORD);
    return this.choose([[true, p], [false, sub(ONE, p)]]);
  }

  uniform(n: number): number {
    if (n > 4096) { // OLH's seeds: given a few (the seed's law ignores the value)
      const values = n === PRIME - 1 ? SEEDS.map(([a]) => a - 1) : SEEDS.map(([, b]) => b);
      return this.choose(values.map((v) => [v, frac(1, values.length)]));
    }
    return this.choose(Array.from({ length: n }, (_, v) => [v, frac(1, n)] as [number, Rational]));
  }

  keepOrUniform(x: number, keep: number, size: number): number {
    const beta = frac(keep, WORD);
    const rest = rat(beta.d - beta.n, beta.d * BigInt(size));
    return this.choose(Array.from({ length: size }, (_, j) => [j, j === x ? add(rest, beta) : rest] as [number, Rational]));
  }

  bits(q: Rational, size: number): Uint8Array {
    const out = new Uint8Array((size + 7) >> 3);
    for (let j = 0; j < size; j++) {
      if (this.choose([[1, q], [0, sub(ONE, q)]])) out[j >> 3]! |= 1 << (j & 7);
    }
    return out;
  }

  uniform63(): bigint {
    throw new Error("matrix outputs are enumerated through their weights");
  }
}

const SEEDS: [number, number][] = [[1, 0], [7, 3], [2 ** 30 + 17, 12345], [PRIME - 2, PRIME - 1],
                                   [99991, 7], [5, 2 ** 29]];

type LawMap = Map<string, Rational>;

function enumerate(run: (d: Draws) => unknown): LawMap {
  const chooser = new Chooser();
  const law: LawMap = new Map();
  do {
    const key = stringify(run(chooser));
    const p = rat(chooser.prob.n, chooser.prob.d);
    const before = law.get(key);
    law.set(key, before === undefined ? p : add(before, p));
  } while (chooser.next());
  const total = [...law.values()].reduce(add, { n: 0n, d: 1n });
  assert.equal(cmp(total, ONE), 0, "the law sums to 1");
  return law;
}

/** The exact max ratio over outputs and input pairs; asserted <= LB(eps). */
function checkLdp(laws: LawMap[], eps: number): Rational {
  const outputs = new Set<string>();
  for (const law of laws) for (const k of law.keys()) outputs.add(k);
  let worst = ONE;
  for (const y of outputs) {
    const probs = laws.map((law) => law.get(y) ?? { n: 0n, d: 1n });
    const lo = probs.reduce((a, b) => (cmp(a, b) <= 0 ? a : b));
    const hi = probs.reduce((a, b) => (cmp(a, b) >= 0 ? a : b));
    assert.ok(lo.n > 0n, `output ${y} is impossible under some input`);
    const ratio = rat(hi.n * lo.d, hi.d * lo.n);
    if (cmp(ratio, worst) > 0) worst = ratio;
  }
  assert.ok(cmp(worst, rat(expLowerBound(fromNumber(eps)), 1n << 128n)) <= 0, "eps-LDP, exactly");
  return worst;
}

/** The declared law of a cell format's report of x (the aggregator's p and q). */
function declared(law: Law, memo: Memo | null, x: number): LawMap {
  const [p, q] = composedLaw(law, memo);
  const out: LawMap = new Map();
  const size = law.size;
  if (law.kind === "grr") {
    for (let y = 0; y < size; y++) out.set(stringify(y), y === x ? p : q);
  } else if (law.kind === "hr") {
    for (let j = 0; j < law.K; j++) {
      for (const b of [0, 1]) {
        const agree = (popcount((x + 1) & j) & 1) === b;
        out.set(stringify([j, b]), mul(frac(1, law.K), agree ? p : sub(ONE, p)));
      }
    }
  } else {
    for (let bits = 0; bits < 2 ** size; bits++) {
      let prob = ONE;
      for (let j = 0; j < size; j++) {
        const one = j === x ? p : q;
        prob = mul(prob, (bits >> j) & 1 ? one : sub(ONE, one));
      }
      const bytes = new Uint8Array((size + 7) >> 3);
      for (let j = 0; j < bytes.length; j++) bytes[j] = (bits >> (8 * j)) & 0xff;
      out.set(stringify(Buffer.from(bytes).toString("base64")), prob);
    }
  }
  return out;
}

function sameLaw(a: LawMap, b: LawMap): void {
  const keys = new Set([...a.keys(), ...b.keys()]);
  for (const k of keys) {
    assert.equal(cmp(a.get(k) ?? { n: 0n, d: 1n }, b.get(k) ?? { n: 0n, d: 1n }), 0, `output ${k}`);
  }
}

function privacyRatio(law: Law, memo: Memo | null): Rational {
  const [p, q] = composedLaw(law, memo);
  if (law.kind === "grr") return rat(p.n * q.d, p.d * q.n);
  if (law.kind === "hr") { const np = sub(ONE, p); return rat(p.n * np.d, p.d * np.n); }
  if (law.kind === "olh") { // given the seed: p_g / q_g
    const beta = frac(law.keep, WORD);
    const qg = rat(beta.d - beta.n, beta.d * BigInt(law.g));
    return rat((beta.n * BigInt(law.g) + beta.d - beta.n) * qg.d, beta.d * BigInt(law.g) * qg.n);
  }
  const a = mul(p, sub(ONE, q));
  const b = mul(q, sub(ONE, p));
  return rat(a.n * b.d, a.d * b.n);
}

for (const name of ["grr", "oue", "sue", "hr", "olh"]) {
  test(`${name} is exactly its declared law, and eps-LDP`, () => {
    for (const [eps, size] of [[0.5, 3], [2.0, 5], [1.0, 8]] as const) {
      const law = lawOf(name, fromNumber(eps), size);
      const fmt = new CellReports(law, [size]);
      const laws = Array.from({ length: size }, (_, x) => enumerate((d) => fmt.perturb(d, x)));
      assert.equal(cmp(checkLdp(laws, eps), privacyRatio(law, null)), 0);
      if (name !== "olh") laws.forEach((l, x) => sameLaw(l, declared(law, null, x)));
    }
  });
}

for (const name of ["grr", "oue", "sue"]) {
  test(`memoized ${name}: permanent + instantaneous compose to the declared law`, () => {
    for (const [eps, longitudinal, size] of [[0.5, 2.0, 3], [1.0, 4.0, 5]] as const) {
      const law = lawOf(name, fromNumber(eps), size);
      const memo = memoLaw(name, fromNumber(eps), fromNumber(longitudinal), size);
      const fmt = new CellReports(law, [size], memo);
      const laws = Array.from({ length: size }, (_, x) => enumerate((d) => fmt.perturb(d, x)));
      assert.equal(cmp(checkLdp(laws, eps), privacyRatio(law, memo)), 0);
      laws.forEach((l, x) => sameLaw(l, declared(law, memo, x)));
      const prr = Array.from({ length: size }, (_, x) => enumerate((d) => fmt.permanent(d, x)));
      assert.equal(cmp(checkLdp(prr, longitudinal), privacyRatio(memo.permanent, null)), 0);
    }
  });
}

// The report formats of the shared vectors' plans (ht, cms, em), and a small memoized em.
async function vectorPlan(name: string): Promise<Plan> {
  if (name === "em_memoized_small") { // sue, grr, sue over 2 x 2 x 2, memoized
    const body: JsonObject = {
      format: "dpmarginals.plan", version: 2, method: "em", epsilon: 1.2, longitudinal_epsilon: 3.0,
      domain: [["a", 2], ["b", 2], ["c", 2]],
      groups: [{ attributes: ["a", "b", "c"], oracle: "em", epsilon: 1.2, cells: 8 }],
      params: { k: 2, attribute_oracles: ["sue", "grr", "sue"] } };
    return parsePlan({ ...body, hash: (await readPlan(body)).hash });
  }
  const item = (vectors().json["plans"] as { name: string; plan: unknown }[]).find((p) => p.name === name)!;
  return parsePlan(item.plan);
}

function records(plan: Plan): number[][] {
  const out: number[][] = [[]];
  for (const size of plan.domain.sizes) {
    const next: number[][] = [];
    for (const r of out) for (let v = 0; v < size; v++) next.push([...r, v]);
    out.splice(0, out.length, ...next);
  }
  return out;
}

function inputOf(plan: Plan, g: number, row: number[]): Input {
  const fmt = groupFormat(plan, g);
  return fmt.encode(plan.groups[g]!.attributes.map((a) => row[plan.domain.index(a)]!));
}

/** Per record: the law of (group, report) with a uniform group. */
function planLaws(plan: Plan): LawMap[] {
  return records(plan).map((row) => {
    const law: LawMap = new Map();
    plan.groups.forEach((_, g) => {
      const fmt: Format = groupFormat(plan, g);
      const x = inputOf(plan, g, row);
      for (const [y, p] of enumerate((d) => fmt.perturb(d, x))) {
        law.set(`${g}:${y}`, mul(p, frac(1, plan.m)));
      }
    });
    return law;
  });
}

/** The formats' declared laws: ht, cms (1/K, then binary RR of the true bit), em (the
 *  product of its attributes' laws). */
function declaredPlanLaw(plan: Plan, row: number[]): LawMap {
  const out: LawMap = new Map();
  plan.groups.forEach((spec, g) => {
    const fmt = groupFormat(plan, g) as Format & Record<string, unknown>;
    const x = inputOf(plan, g, row);
    if (fmt.name === "ht" || fmt.name === "cms") {
      const K = fmt["K"] as number;
      const p = frac(fmt["keep"] as number, WORD);
      for (let i = 0; i < K; i++) {
        const bit = (fmt as unknown as { trueBit(x: Input, i: number): number }).trueBit(x, i);
        for (const b of [0, 1]) {
          out.set(`${g}:${stringify([i, b])}`, mul(frac(1, K * plan.m), b === bit ? p : sub(ONE, p)));
        }
      }
      return;
    }
    assert.equal(fmt.name, "em");
    const d = spec.attributes.length;
    const eps = fromNumber(plan.epsilon);
    const share = rat(eps.n, eps.d * BigInt(d));
    const perAttr: LawMap[] = (x as number[]).map((v, j) => {
      const size = plan.domain.size(spec.attributes[j]!);
      const o = (plan.params["attribute_oracles"] as string[])[plan.domain.index(spec.attributes[j]!)]!;
      const law = lawOf(o, share, size);
      const memo = plan.longitudinal === null ? null
        : memoLaw(o, share, rat(fromNumber(plan.longitudinal).n, fromNumber(plan.longitudinal).d * BigInt(d)), size);
      const each = declared(law, memo, v);
      if (o === "grr") return each;
      const classes: LawMap = new Map(); // unary: the bits as one integer
      for (const [k, p] of each) {
        const bytes = Buffer.from(JSON.parse(k) as string, "base64");
        let cls = 0;
        for (let i = bytes.length - 1; i >= 0; i--) cls = cls * 256 + bytes[i]!;
        classes.set(stringify(cls), p);
      }
      return classes;
    });
    let joint: [unknown[], Rational][] = [[[], ONE]];
    for (const attr of perAttr) {
      const next: [unknown[], Rational][] = [];
      for (const [ys, p] of joint) for (const [y, q] of attr) next.push([[...ys, JSON.parse(y)], mul(p, q)]);
      joint = next;
    }
    for (const [ys, p] of joint) out.set(`${g}:${stringify(ys)}`, mul(p, frac(1, plan.m)));
  });
  return out;
}

for (const name of ["inp_ht", "inp_ht_attributes", "marg_ht", "inp_htcms", "em", "em_oue", "em_memoized_small"]) {
  test(`${name}: every report format is exactly its declared law, and eps-LDP`, async () => {
    const plan = await vectorPlan(name);
    const laws = planLaws(plan);
    const worst = checkLdp(laws, plan.epsilon);
    if (plan.longitudinal === null) {
      // tight: the budget is used (up to the 32-bit rounding of the thresholds)
      assert.ok(Number(worst.n * 10n ** 9n / worst.d) / 1e9 >= Math.exp(plan.epsilon) * (1 - 1e-7));
    }
    records(plan).forEach((row, r) => sameLaw(laws[r]!, declaredPlanLaw(plan, row)));
  });
}

test("matrix: uniform63 gives output o for exactly W[o, x] of the 2^63 values", async () => {
  const plan = await vectorPlan("matrix");
  const fmt = groupFormat(plan, 0) as StrategyMatrix;
  const weights = (fmt as unknown as { cumulative: BigUint64Array }).cumulative;
  const rows = fmt.size;
  const cells = plan.groups[0]!.cells;
  for (let x = 0; x < cells; x++) {
    const bounds = Array.from(weights.subarray(x * rows, (x + 1) * rows));
    assert.equal(bounds[rows - 1], 1n << 63n);
    const probes = new Set<bigint>();
    for (let i = 0; i < 200; i++) probes.add(BigInt(Math.floor(Math.random() * 2 ** 31)) << 32n | BigInt(Math.floor(Math.random() * WORD)));
    for (const b of bounds.slice(0, -1)) { probes.add(b - 1n); probes.add(b); }
    for (const u of probes) {
      if (u < 0n || u >= 1n << 63n) continue;
      const src = new WordStream([Number(u & 0xffffffffn), Number(u >> 32n)]);
      const o = fmt.perturb(new WordDraws(src), x) as number;
      assert.ok((o ? bounds[o - 1]! : 0n) <= u && u < bounds[o]!, `x = ${x}, u = ${u}, o = ${o}`);
    }
    // every sent row's max/min <= LB(eps), in integers
  }
  const lb = expLowerBound(fromNumber(plan.epsilon));
  for (let o = 0; o < rows; o++) {
    const row = Array.from({ length: cells }, (_, x) => weights[x * rows + o]! - (o ? weights[x * rows + o - 1]! : 0n));
    const hi = row.reduce((a, b) => (a > b ? a : b));
    const lo = row.reduce((a, b) => (a < b ? a : b));
    if (hi > 0n) assert.ok(hi << 128n <= lo * lb);
  }
});
