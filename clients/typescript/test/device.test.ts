// The device against a dishonest aggregator (tests/test_hostile_server.py's cases, for the
// TypeScript client): every plan, ledger and phase trick refused or paid for within the
// device's own caps, in one line, before any random draw (`drawn()` counts every word and
// id taken from crypto.getRandomValues; a refusal with a draw fails).
import assert from "node:assert/strict";
import { test } from "node:test";
import { checkPlan } from "../src/checks.js";
import { DAY, Device, type DeviceCaps } from "../src/device.js";
import { BudgetExceeded, DPMarginalsError, LedgerError, PlanRefused } from "../src/errors.js";
import { toNumber } from "../src/exact.js";
import { type JsonObject, canonical, parseJson, stringify } from "../src/json.js";
import { MemoryStore } from "../src/ledger.js";
import { drawn } from "../src/random.js";
import { ORIGIN, RECORD, emPlan, matrixPlan, planBody, planWith, served } from "./plans.js";

async function refused(call: () => Promise<unknown>, match: RegExp | string,
                       kind: Function = PlanRefused): Promise<string> {
  const before = drawn();
  let message = "";
  await assert.rejects(call(), (exc: Error) => {
    assert.ok(exc instanceof kind, `${exc.name}: ${exc.message}`);
    assert.ok(typeof match === "string" ? exc.message.includes(match) : match.test(exc.message), exc.message);
    message = exc.message;
    return true;
  });
  assert.ok(!message.includes("\n"), "one line");
  assert.equal(drawn(), before, "randomness was drawn before the refusal");
  return message;
}

function device(maxEpsilon = 1.0, total = 10.0, more: Partial<DeviceCaps> = {}): Promise<Device> {
  return Device.open(null, { maxEpsilon, maxTotalEpsilon: total, ...more });
}

const total = (d: Device) => toNumber(d.ledger.total());
const where = (campaign: string, group?: number) => ({ origin: ORIGIN, campaign, group });

test("the instrument sees draws", async () => {
  const before = drawn();
  await (await device()).report(await planWith(), RECORD, where("c"));
  assert.ok(drawn() > before);
});

// -- plan checks ------------------------------------------------------------------------------
test("a group epsilon above the plan's is refused", async () => {
  const phone = await device(5.0);
  const bad = await planWith({ groupEpsilon: 20.0 });
  const msg = await refused(() => phone.report(bad, RECORD, where("c")),
                            "groups[1].epsilon = 20.0 differs from the plan's epsilon = 1.0");
  assert.ok(msg.startsWith("plan refused: "));
  await refused(async () => checkPlan(await planWith({ groupEpsilon: 0.5 }), 1.0), "groups[1].epsilon = 0.5");
  assert.equal(total(phone), 0);
});

test("a plan epsilon above the device's cap is refused", async () => {
  const plan = await planWith({ epsilon: 2.0 });
  await refused(async () => (await device(1.0)).report(plan, RECORD, where("c")),
                "epsilon = 2.0 exceeds this device's max_epsilon = 1.0");
});

test("every cap of a device is required and sane", async () => {
  await refused(() => Device.open(null, { maxEpsilon: 1 } as DeviceCaps), "max_total_epsilon must be a number",
                DPMarginalsError);
  await refused(() => Device.open(null, { maxTotalEpsilon: 1 } as DeviceCaps), "max_epsilon must be a number",
                DPMarginalsError);
  for (const cap of [null, 0, -1.0, Infinity, NaN, true, "1", 40]) {
    await refused(() => device(cap as number), "max_epsilon must be", DPMarginalsError);
  }
  for (const cap of [null, 0, Infinity, "3"]) {
    await refused(() => device(1, cap as number), "max_total_epsilon must be", DPMarginalsError);
  }
  await refused(() => device(1, 1, { maxPeriodEpsilon: -1 }), "max_period_epsilon must be", DPMarginalsError);
});

test("non-finite and absurd epsilons are refused", async () => {
  for (const [eps, match] of [[-1.0, "epsilon = -1.0 is not a finite"],
                              [50.0, "epsilon = 50.0 exceeds 20, beyond any meaningful privacy"]] as const) {
    const body = planBody({ epsilon: eps });
    await refused(async () => checkPlan(await served(body), 20.0), match);
  }
  for (const eps of [NaN, Infinity]) {
    const body = { ...(await planWith()), epsilon: eps };
    await refused(() => checkPlan(body, 20.0), "not portable JSON");
  }
});

test("a plan whose hash does not match or is missing is refused", async () => {
  const good = await planWith();
  assert.equal((await checkPlan(good, 1.0)).hash, good["hash"]);
  const groups = good["groups"] as JsonObject[];
  const tampered = { ...good, groups: [groups[0]!, { ...groups[1]!, epsilon: 20.0 }, groups[2]!] };
  await refused(() => checkPlan(tampered, 1.0), /hash = '[0-9a-f]{64}' does not match the plan's content/);
  const { hash: _, ...unhashed } = good;
  await refused(() => checkPlan(unhashed, 1.0), "hash is missing");
  await refused(() => checkPlan(stringify(unhashed), 1.0), "hash is missing");
  // a stale hash: the plan of yesterday's hash with today's content
  const stale = { ...(await planWith({ params: { nonce: 2 } })), hash: good["hash"] };
  await refused(() => checkPlan(stale, 1.0), `hash = '${good["hash"]}' does not match`);
});

test("wrong cells, unknown oracles, fields and big numbers are refused", async () => {
  await refused(async () => checkPlan(await planWith({ change: { cells: 7 } }), 1.0),
                "groups[1].cells = 7 but the marginal over ['b', 'c'] has 15 cells");
  await refused(async () => checkPlan(await planWith({ oracle: "rappor" }), 1.0),
                "groups[0].oracle = 'rappor' is not one of");
  await refused(async () => checkPlan(await planWith({ oracle: "ht", params: { k: "2" } }), 1.0),
                "groups[0] (ht): plan params.k must be");
  await refused(async () => checkPlan(await planWith({ change: { attributes: ["b", "z"], cells: 6 } }), 1.0),
                "'z' is not in the domain");
  const olh = await planWith({ oracle: "olh" });
  (olh["groups"] as JsonObject[])[0]!["g"] = 1000;
  await refused(() => checkPlan(olh, 1.0), "groups[0] has unknown field 'g' = 1000");
  await refused(async () => checkPlan({ ...(await planWith()), sampling: "all" }, 1.0), "unknown field 'sampling'");
  const big = await planWith();
  (big["params"] as JsonObject)["nonce"] = 2 ** 60;
  await refused(() => checkPlan(big, 1.0), "params.nonce = 1152921504606846976 is beyond 2^53 - 1");
  const text = stringify(await planWith()).replace('"k":2', '"k":2,"nonce":1152921504606846977');
  await refused(() => checkPlan(text, 1.0), "params.nonce = 1152921504606846977 is beyond 2^53 - 1");
});

test("per-attribute and rr budgets are checked by what their params imply", async () => {
  assert.ok(await checkPlan(await emPlan(), 1.0));
  await refused(async () => checkPlan(await emPlan(["grr", "grr", "grr"], { epsilon_per_attribute: 1.0 }), 1.0),
                "params.epsilon_per_attribute = 1 over 3 attributes composes to 3.0 > the plan's epsilon = 1.0");
  const keep = 1 / (1 + Math.exp(-3.0));
  const rr = await served({ ...planBody(), method: "ft", groups: [], params: { k: 2, p: keep } });
  await refused(() => checkPlan(rr, 1.0), /params\.p = .* implies epsilon 3\.0/);
});

test("an em plan naming olh or hr is refused before any draw", async () => {
  for (const names of [["olh", "hr", "grr"], ["grr", "olh", "grr"], ["grr", "grr"]]) {
    const plan = await emPlan(names);
    await refused(async () => (await device()).report(plan, RECORD, where("e")),
                  "groups[0] (em): plan params.attribute_oracles must");
  }
});

test("a memoized plan of a format that cannot be memoized is refused", async () => {
  for (const oracle of ["olh", "hr"]) {
    await refused(async () => checkPlan(await planWith({ oracle, longitudinal: 4.0 }), 1.0),
                  new RegExp(`groups\\[0\\] \\(${oracle}\\): .* cannot be memoized`));
  }
  const body = { ...(await planWith({ longitudinal: 4.0 })), longitudinal_epsilon: 0.5 };
  await refused(() => checkPlan(body, 1.0), "longitudinal_epsilon = 0.5 must be a finite number >= epsilon = 1.0");
});

test("a matrix with tiny rows is refused in integers before any draw", async () => {
  const total63 = 1n << 63n;
  const half = total63 / 2n;
  const tiny = [[half - 1n, half], [half, half - 1n], [1n, 0n], [0n, 1n]];
  await refused(async () => (await device()).report(await matrixPlan(tiny), [0], where("m")),
                "not 1.0-LDP: row 2 has max/min = inf");
  const lo = 10n ** 17n;
  const e = 2718281828459045235n; // e * 10^18, above e: a hair over refused, under accepted
  for (const [hi, ok] of [[lo * e / 10n ** 18n + 1000n, false], [lo * 2718n / 1000n, true]] as const) {
    const plan = await matrixPlan([[hi, lo], [total63 - hi, total63 - lo]]);
    if (ok) await checkPlan(plan, 1.0);
    else await refused(() => checkPlan(plan, 1.0), "row 0 has max/min");
  }
  const floats = await matrixPlan(tiny);
  (floats["params"] as JsonObject)["strategy"] = { rows: 4, columns: 2, float64: ["AAAA"] };
  const { hash: _, ...body } = floats;
  await refused(async () => checkPlan(await served(body), 1.0), "float64 weights");
});

// -- re-minted plans, many campaigns: the caps bound them -------------------------------------
test("re-minted plans are each charged and the total cap bounds them", async () => {
  const phone = await device(1.0, 3.0);
  for (let i = 0; i < 3; i++) await phone.report(await planWith({ params: { nonce: i } }), RECORD, where(`c${i}`));
  assert.equal(total(phone), 3);
  const body = await planWith({ params: { nonce: 3 } });
  await refused(() => phone.report(body, RECORD, where("c3")),
                "max_total_epsilon = 3 refuses this report: spent 3 + 1 > 3", BudgetExceeded);
  assert.equal(total(phone), 3);
});

test("a thousand campaigns from one server spend at most the caps", async () => {
  let now = 1.8e9;
  const phone = await Device.open(null, { maxEpsilon: 1.0, maxTotalEpsilon: 5.0, maxPeriodEpsilon: 2.0,
                                          clock: () => now });
  const sent: number[] = [];
  let day = 0;
  for (let i = 0; i < 1000; i++) {
    if (i && i % 100 === 0) { now += DAY; day++; }
    try {
      await phone.report(await planWith({ params: { nonce: i } }), RECORD, where(`c${i}`));
      sent.push(day);
    } catch (exc) {
      assert.ok(exc instanceof BudgetExceeded && !exc.message.includes("\n"));
    }
  }
  assert.deepEqual(sent, [0, 0, 1, 1, 2]);
  assert.equal(total(phone), 5);
  assert.equal(phone.remaining(), 0);
});

test("the period cap is a sliding window", async () => {
  let now = 1.8e9;
  const phone = await Device.open(null, { maxEpsilon: 1.0, maxTotalEpsilon: 100.0, maxPeriodEpsilon: 1.0,
                                          periodSeconds: 3600, clock: () => now });
  const plan = await planWith();
  await phone.report(plan, RECORD, where("a"));
  now += 3599;
  await refused(() => phone.report(plan, RECORD, where("b")), "per 3600 s", BudgetExceeded);
  now += 2;
  await phone.report(plan, RECORD, where("b"));
});

// -- pinning and phases -------------------------------------------------------------------------
test("a plan changed mid-campaign is refused", async () => {
  const phone = await device();
  const plan = await planWith();
  const first = await phone.report(plan, RECORD, where("flu"));
  const again = await phone.report(plan, RECORD, where("flu"));
  assert.deepEqual(again, first); // the stored report, not a new one
  assert.equal(total(phone), 1);
  const changed = await planWith({ params: { k: 3 } });
  await refused(() => phone.report(changed, RECORD, where("flu")),
                /campaign 'flu' at https:\/\/stats\.example\.org is pinned to plan \w+ \(first seen\), the server now shows/);
  await phone.report(changed, RECORD, { origin: "https://other.example", campaign: "flu" });
  assert.equal(total(phone), 2);
});

test("a campaign is pinned on first sight, even without a report", async () => {
  const phone = await device();
  const plan = await planWith();
  assert.equal((await phone.accept(plan, where("seen"))).hash, plan["hash"]);
  await refused(async () => phone.report(await planWith({ params: { k: 3 } }), RECORD, where("seen")),
                "is pinned to plan");
});

async function phases(): Promise<JsonObject[]> {
  const one = await planWith({ method: "adaptive", params: { phase: 1, phases: 3 } });
  const two = await planWith({ method: "adaptive", params: { phase: 2, phases: 3, earlier_hashes: [one["hash"]!],
                                                           phase1_campaign: "s" } });
  const three = await planWith({ method: "adaptive", params: { phase: 3, phases: 3,
                                                             earlier_hashes: [one["hash"]!, two["hash"]!],
                                                             phase1_campaign: "s" } });
  return [one, two, three];
}

test("a device that reported in a phase refuses every other phase", async () => {
  const plans = await phases();
  const names = ["s", "s.phase2", "s.phase3"];
  for (const earlier of [0, 1]) {
    const phone = await device();
    await phone.report(plans[earlier], RECORD, where(names[earlier]!));
    for (let later = earlier + 1; later < 3; later++) {
      await refused(() => phone.report(plans[later], RECORD, where(names[later]!)),
                    `this device reported in '${names[earlier]}', a phase of the same collection`);
    }
    assert.equal(total(phone), 1);
  }
  const fresh = await device();
  await fresh.report(plans[2], RECORD, where("s.phase3"));
  assert.equal(total(fresh), 1);
});

test("a later phase with its earlier hashes stripped is refused", async () => {
  const plans = await phases();
  const params = { ...(plans[1]!["params"] as JsonObject) };
  delete params["earlier_hashes"];
  const { hash: _, ...body } = { ...plans[1]!, params } as JsonObject;
  const stripped = await served(body);
  const phone = await device();
  await phone.report(plans[0], RECORD, where("s"));
  await refused(() => phone.report(stripped, RECORD, where("s.phase2")),
                "reported in 's', a phase of the same collection");
  const watcher = await device();
  await watcher.accept(plans[0], where("s"));
  await refused(() => watcher.report(stripped, RECORD, where("s.phase2")),
                /does not chain from the plan \w+ this device pinned/);
  assert.equal(total(watcher), 0);
  await watcher.report(plans[1], RECORD, where("s.phase2")); // the genuine phase 2
});

// -- memoization: no linkage, and what it costs -------------------------------------------
test("reports of an unchanged value differ; a family costs at most R x longitudinal", async () => {
  const plan = await planWith({ longitudinal: 4.0 });
  const phone = await device(1.0, 100.0);
  const payloads = new Set<string>();
  for (let i = 0; i < 20; i++) payloads.add(stringify((await phone.report(plan, RECORD, where(`day${i}`, 1))).payload));
  assert.ok(payloads.size >= 15, `${payloads.size}`);
  assert.equal(total(phone), 20);
  // group 1 (b, c): 15 values and the substitute, R = 16: charged until 64, changed value or not
  for (let i = 20; i < 70; i++) await phone.report(plan, { ...RECORD, c: i % 5 }, where(`day${i}`, 1));
  assert.equal(total(phone), 64);
  assert.equal(Object.keys(phone.ledger.document()["permanent"] as object).length, 5);
});

test("whether a memoized report is refused never depends on the value (every history of 6)", async () => {
  // a server whose campaigns bring a device near its cap would learn from a refusal that
  // the value changed, were an unchanged value's reports cheaper: the charge reads only the
  // family, so all 3^6 histories (each age bin, or outside the domain) look alike
  const plan = await sliced(20, 24, 4.0);
  const outcomes = async (history: number[]): Promise<string> => {
    const phone = await device(1.0, 4.5, { onWarning: () => {} });
    const seen: string[] = [];
    for (const [i, age] of history.entries()) {
      try {
        await phone.report(plan, { age }, where(`day${i}`));
        seen.push(`report ${total(phone)}`);
      } catch (e) {
        if (!(e instanceof BudgetExceeded)) throw e;
        seen.push(`refused ${total(phone)}`);
      }
    }
    return seen.join(", ");
  };
  const expected = await outcomes(new Array(6).fill(21));
  assert.equal(expected, "report 1, report 2, report 3, report 4, refused 4, refused 4");
  for (let h = 0; h < 3 ** 6; h++) {
    const history = Array.from({ length: 6 }, (_, j) => [21, 23, 80][Math.floor(h / 3 ** j) % 3]!);
    assert.equal(await outcomes(history), expected, String(history));
  }
});

test("a device that does not memoize draws every report afresh", async () => {
  // the owner's choice whatever the plan says: nothing kept, each report charged in full
  const phone = await device(1.0, 100.0, { memoize: false });
  const plan = await planWith({ longitudinal: 4.0 });
  const payloads = new Set<string>();
  for (let i = 0; i < 20; i++) payloads.add(stringify((await phone.report(plan, RECORD, where(`f${i}`, 1))).payload));
  assert.ok(payloads.size >= 15, `${payloads.size}`);
  assert.equal(total(phone), 20);
  assert.deepEqual(phone.ledger.document()["permanent"], {});
  // the floor guards against linked reports: a device that keeps nothing needs none
  const fresh = await device(1.0, 10.0, { memoize: false });
  await fresh.report(await planWith({ longitudinal: 1.0 }), RECORD, where("l", 1));
  assert.equal(total(fresh), 1);
  await assert.rejects(device(1.0, 1.0, { memoize: "no" as unknown as boolean }),
                       (e: Error) => e instanceof DPMarginalsError && e.message.includes("memoize must be true or false"));
});

test("unmemoized formats send no stable identifier", async () => {
  const phone = await device(1.0, 100.0);
  const plan = await planWith({ oracle: "olh" });
  const seeds = new Set<string>();
  for (let i = 0; i < 20; i++) seeds.add(String(((await phone.report(plan, RECORD, where(`o${i}`, 0))).payload as bigint[])[0]));
  assert.equal(seeds.size, 20);
  assert.equal(total(phone), 20);
});

test("the device keeps its group per plan whatever the server assigns", async () => {
  const warnings: string[] = [];
  const phone = await Device.open(null, { maxEpsilon: 1, maxTotalEpsilon: 100, onWarning: (m) => warnings.push(m) });
  const plan = await planWith({ longitudinal: 4.0 });
  const first = await phone.report(plan, RECORD, where("a", 2));
  const second = await phone.report(plan, RECORD, where("b", 0));
  assert.equal(first.group, 2);
  assert.equal(second.group, 2);
  assert.match(warnings[0]!, /reports group 2 in every campaign/);
});

// -- bad input to the API: one clear error naming the field and value, before any draw ---
test("an app's own mistakes are refused; a value outside the domain is reported at random", async () => {
  const phone = await device();
  const plan = await planWith();
  await refused(() => phone.report(plan, [1, 2], where("r", 1)),
                "a record needs 3 values in the domain's order ['a', 'b', 'c'], got 2", DPMarginalsError);
  await refused(() => phone.report(plan, { a: 1, b: 0, c: 0 }, where("r", 7)),
                "group 7 is not one of the plan's groups 0..2", DPMarginalsError);
  assert.equal(total(phone), 0);
  // a refusal the server could see would tell it the value lies outside its domain: the
  // device reports a uniformly random value instead, charged, and tells the app locally
  for (const [record, why] of [[{ a: 1, b: 3, c: 0 }, "value 3 of attribute 'b' is outside its domain 0..2"],
                               [{ a: 1, c: 0 }, "the record lacks the attributes ['b']"],
                               [{ a: 1, b: "x", c: 0 }, "attribute 'b' must be an integer code, got 'x'"]] as const) {
    const warnings: string[] = [];
    const fresh = await device(1.0, 10.0, { onWarning: (m) => warnings.push(m) });
    const before = drawn();
    const report = await fresh.report(plan, record, where("r", 1));
    assert.equal(report.group, 1);
    assert.ok(drawn() > before);
    assert.equal(total(fresh), 1.0);
    assert.equal(warnings.length, 1);
    assert.ok(warnings[0]!.startsWith(`${why}: reported as a uniformly random value of ['b', 'c']`), warnings[0]);
  }
});

async function sliced(lo: number, hi: number, longitudinal: number | null): Promise<JsonObject> {
  return served({ format: "dpmarginals.plan", version: 2, method: "calm", epsilon: 1.0,
                  longitudinal_epsilon: longitudinal, domain: [["age", { bins: [lo, (lo + hi) / 2, hi] }]],
                  groups: [{ attributes: ["age"], oracle: "grr", epsilon: 1.0, cells: 2 }],
                  params: { k: 1 } });
}

test("domains sliced by the server learn nothing from whether a device reports", async () => {
  for (const longitudinal of [null, 4.0]) {
    const outcomes = async (age: number): Promise<string[]> => {
      const phone = await device(1.0, 6.0, { onWarning: () => {} });
      const seen: string[] = [];
      for (let lo = 20; lo < 60; lo += 4) {
        try {
          await phone.report(await sliced(lo, lo + 4, longitudinal), { age }, where(`slice${lo}`));
          seen.push("report");
        } catch (e) {
          if (!(e instanceof BudgetExceeded)) throw e;
          seen.push("refused");
        }
      }
      return seen;
    };
    const first = await outcomes(37.3);
    assert.deepEqual(first, [...new Array(6).fill("report"), ...new Array(4).fill("refused")]);
    assert.deepEqual(await outcomes(80.0), first);
    assert.deepEqual(await outcomes(21.0), first);
  }
  // memoized: one substitute per family; the family (two ages and the substitute, R = 3)
  // costs at most 3 x the longitudinal epsilon in all
  const phone = await device(1.0, 100.0, { onWarning: () => {}, minLongitudinalRatio: 2 });
  const plan = await sliced(20, 24, 2.0);
  for (let c = 0; c < 8; c++) await phone.report(plan, { age: 80 + c }, where(`m${c}`));
  assert.equal(total(phone), 6.0);
  assert.deepEqual(Object.keys(phone.ledger.document()["permanent"] as object).map((k) => k.split(":")[1]),
                   ["substitute"]);
});

test("an onWarning that throws cannot turn a substitution into a refusal", async () => {
  // no report exactly when the value lies outside the server's domain would tell it so
  const phone = await device(1.0, 10.0, { onWarning: (m) => { throw new Error(m); } });
  await phone.report(await sliced(20, 24, null), { age: 21 }, where("a"));
  const outside = await phone.report(await sliced(20, 24, null), { age: 80 }, where("b"));
  assert.equal(outside.group, 0);
  assert.equal(total(phone), 2);
});

test("labelled records: labels, raw numbers cut by bins, the catch-all", async () => {
  const body = await served({
    format: "dpmarginals.plan", version: 2, method: "calm", epsilon: 1.0, longitudinal_epsilon: null,
    domain: [["sex", ["female", "male"]], ["age", { bins: [0, 18, 65, 120] }],
             ["country", { labels: ["US", "DE"], other: true }]],
    groups: [{ attributes: ["sex", "age", "country"], oracle: "grr", epsilon: 1.0, cells: 18 }], params: {} });
  const plan = await checkPlan(body, 1.0);
  assert.equal(canonical(plan.domain.spec("age")),
               '{"bins":[0,18,65,120],"labels":["[0, 18)","[18, 65)","[65, 120]"]}');
  const phone = await device();
  const report = await phone.report(body, { sex: "male", age: 37, country: "FR" }, where("l"));
  assert.equal(report.group, 0);
  // values the domain lacks: a random value reported, the app told (locally)
  const warnings: string[] = [];
  const told = await device(1.0, 10.0, { onWarning: (m) => warnings.push(m) });
  await told.report(body, { sex: "other", age: 37, country: "US" }, where("l2"));
  await told.report(body, { sex: "male", age: 121, country: "US" }, where("l3"));
  assert.match(warnings[0]!, /^attribute 'sex': value 'other' is not in the declared domain \['female', 'male'\]: reported/);
  assert.match(warnings[1]!, /^attribute 'age': value 121 is not in the declared domain/);
});

test("a corrupt ledger is a clear error and is never reset", async () => {
  const store = new MemoryStore();
  await store.write('{"format": "dpmarginals.ledger", "version": 2, "campaigns": [}');
  await refused(() => Device.open(store, { maxEpsilon: 1, maxTotalEpsilon: 3 }),
                /is corrupt .*restore it from a backup/, LedgerError);
  assert.ok((await store.read())!.endsWith("[}"));
  await store.write(stringify({ format: "dpmarginals.ledger", version: 1 }));
  await refused(() => Device.open(store, { maxEpsilon: 1, maxTotalEpsilon: 3 }),
                "version 1 is not one this dpmarginals reads", LedgerError);
  await store.write(stringify({ format: "dpmarginals.ledger", version: 3, campaigns: {}, groups: {}, charges: [],
                                permanent: { "f:1": { response: 1, longitudinal: 4.0 } } }));
  await refused(() => Device.open(store, { maxEpsilon: 1, maxTotalEpsilon: 3 }),
                "permanent['f:1'].responses is missing", LedgerError);
  for (const responses of [0, 1, 1.5, true, "3", 2 ** 53]) {
    await store.write(stringify({ format: "dpmarginals.ledger", version: 3, campaigns: {}, groups: {}, charges: [],
                                  permanent: { "f:1": { response: 1, longitudinal: 4.0, responses } } }));
    await refused(() => Device.open(store, { maxEpsilon: 1, maxTotalEpsilon: 3 }),
                  "permanent['f:1'].responses must be a count in 2..2^53 - 1 or null", LedgerError);
  }
  for (const key of ["constructor", "toString", "__proto__", "hasOwnProperty"]) { // not its own keys
    await store.write(stringify({ format: "dpmarginals.ledger", version: 3, campaigns: {}, groups: {}, permanent: {},
                                  charges: [{ campaign: "c", epsilon: 1, time: 1, permanent: key }] }));
    await refused(() => Device.open(store, { maxEpsilon: 1, maxTotalEpsilon: 3 }), "charges[0] is malformed",
                  LedgerError);
  }
  await store.write(stringify({ format: "dpmarginals.ledger", version: 2, campaigns: {}, groups: {}, permanent: {},
                                charges: {} }));
  await refused(() => Device.open(store, { maxEpsilon: 1, maxTotalEpsilon: 3 }), "'charges' a list", LedgerError);
  // a ledger changed by another writer between two reports: read again under the lock
  const good = new MemoryStore();
  const phone = await Device.open(good, { maxEpsilon: 1, maxTotalEpsilon: 3 });
  await phone.report(await planWith(), RECORD, where("x"));
  const doc = parseJson((await good.read())!) as JsonObject;
  (doc["charges"] as JsonObject[])[0]!["epsilon"] = "lots";
  await good.write(stringify(doc));
  await refused(() => phone.report(planWith(), RECORD, where("y")), "charges[0].epsilon must be a number",
                LedgerError);
});

test("a version-2 ledger is read with every report charged in full", async () => {
  // the per-value rule's ledger: its reports charged their epsilon, its permanent responses
  // (the user's values) forgotten, written as version 3 at the next report
  const store = new MemoryStore();
  const campaigns: Record<string, JsonObject> = {};
  const charges: JsonObject[] = [];
  for (let i = 0; i < 6; i++) {
    campaigns[`https://x|c${i}`] = { plan_hash: "h", root: `c${i}`, report: null };
    charges.push({ time: 1.0, campaign: `https://x|c${i}`, epsilon: 1.0, permanent: "fam:4" });
  }
  await store.write(stringify({ format: "dpmarginals.ledger", version: 2, groups: {}, campaigns, charges,
                                permanent: { "fam:4": { response: [0, 1], longitudinal: 4.0 } } }));
  const phone = await Device.open(store, { maxEpsilon: 1, maxTotalEpsilon: 7 });
  assert.equal(total(phone), 6);
  assert.deepEqual(phone.ledger.document()["permanent"], {});
  await phone.report(await planWith({ longitudinal: 4.0 }), RECORD, where("new", 1));
  const written = parseJson((await store.read())!) as JsonObject;
  assert.equal(written["version"], 3);
  assert.equal(total(phone), 7);
  assert.deepEqual(Object.keys(written["permanent"] as object).map((k) => k.split(":")[1]), ["14"]);
});

test("a ledger edited against its plans is refused", async () => {
  // R and L belong to a family: a stored R unlike its plan's is refused, not charged; a kept
  // group outside the plan, too, before the check of the caps
  const store = new MemoryStore();
  const phone = await Device.open(store, { maxEpsilon: 1, maxTotalEpsilon: 100 });
  const plan = await planWith({ longitudinal: 4.0 });
  await phone.report(plan, RECORD, where("a", 1));
  const doc = parseJson((await store.read())!) as JsonObject;
  for (const memo of Object.values(doc["permanent"] as Record<string, JsonObject>)) memo["responses"] = 2;
  await store.write(stringify(doc));
  await refused(() => phone.report(plan, RECORD, where("b", 1)), "allows 8 for its family, whose plan allows 64",
                LedgerError);
  const checked = await checkPlan(plan, 1.0);
  await refused(() => phone.checkCharge(checked, 7, ORIGIN), "the ledger keeps group 7 for plan", LedgerError);
});

test("a stored permanent response that is not a valid payload is refused before any draw", async () => {
  const store = new MemoryStore();
  const phone = await Device.open(store, { maxEpsilon: 1, maxTotalEpsilon: 30 });
  const plan = await planWith({ longitudinal: 4.0 });
  await phone.report(plan, RECORD, where("d1", 1));
  const doc = parseJson((await store.read())!) as JsonObject;
  const perm = doc["permanent"] as Record<string, JsonObject>;
  for (const key of Object.keys(perm)) perm[key]!["response"] = "////////";
  await store.write(stringify(doc));
  await refused(() => phone.report(plan, RECORD, where("d2", 1)), /permanent response .* is invalid/, LedgerError);
});

test("the ledger is the Python client's document", async () => {
  const store = new MemoryStore();
  const phone = await Device.open(store, { maxEpsilon: 1, maxTotalEpsilon: 30, clock: () => 1.8e9 });
  const plan = await planWith({ longitudinal: 4.0 });
  const report = await phone.report(plan, RECORD, where("d1", 1));
  const doc = parseJson((await store.read())!) as JsonObject;
  assert.deepEqual(Object.keys(doc).sort(), ["campaigns", "charges", "format", "groups", "permanent", "version"]);
  assert.deepEqual(Object.keys(report), ["version", "plan_hash", "group", "payload", "report_id"]);
  assert.match(report.report_id, /^[0-9a-f]{32}$/);
  const charge = (doc["charges"] as JsonObject[])[0]!;
  assert.deepEqual({ ...charge, permanent: typeof charge["permanent"] },
                   { time: 1.8e9, campaign: `${ORIGIN}|d1`, epsilon: 1, permanent: "string" });
  assert.match(charge["permanent"] as string, /^[0-9a-f]{32}:\d+$/);
});

test("without crypto.getRandomValues the client refuses to run", async () => {
  const phone = await device();
  const plan = await planWith();
  const saved = Object.getOwnPropertyDescriptor(globalThis, "crypto")!;
  const subtle = globalThis.crypto.subtle;
  Object.defineProperty(globalThis, "crypto", { value: { subtle }, configurable: true });
  try {
    await assert.rejects(phone.report(plan, RECORD, where("nr", 0)), /refuses to run without crypto\.getRandomValues/);
  } finally {
    Object.defineProperty(globalThis, "crypto", saved);
  }
  assert.equal(total(phone), 0);
});

test("no word source can be passed to the public API", async () => {
  const api = await import("../src/index.js");
  for (const name of ["WordStream", "WordDraws", "SecureWords", "ByteSampler", "groupFormat", "setNodeCrypto"]) {
    assert.ok(!(name in api), name);
  }
  const node = await import("../src/node.js");
  assert.ok(!("setNodeCrypto" in node) && !("WordDraws" in node));
});

test("an ht plan with a huge k costs what its attributes allow", async () => {
  const body = (k: number) => served({
    format: "dpmarginals.plan", version: 2, method: "calm", epsilon: 1.0, longitudinal_epsilon: null,
    domain: [["a", 4], ["b", 3]], groups: [{ attributes: ["a", "b"], oracle: "ht", epsilon: 1.0, cells: 12 }],
    params: { k } });
  const started = Date.now();
  const huge = await (await device()).report(await body(1e9), { a: 1, b: 2 }, where("h"));
  assert.ok(Date.now() - started < 5000);
  const small = await (await device()).report(await body(2), { a: 1, b: 2 }, where("h"));
  assert.equal(Array.isArray(huge.payload), Array.isArray(small.payload));
});

test("a memoized plan below the device's floor is refused", async () => {
  // nearer longitudinal = epsilon, a family's reports to one server are nearly its permanent
  // response: refused below the floor (default 4 x epsilon), nothing drawn
  for (const longitudinal of [1.0, 2.0, 3.99]) {
    await refused(async () => (await device()).report(await planWith({ longitudinal }), RECORD, where("m")),
                  `longitudinal_epsilon = ${longitudinal} is below this device's floor, 4 x epsilon = 4: `
                  + "its reports would link across campaigns");
  }
  await (await device()).report(await planWith({ longitudinal: 4.0 }), RECORD, where("m"));
  const ownerSet = await device(1.0, 10.0, { minLongitudinalRatio: 2 });
  await ownerSet.report(await planWith({ longitudinal: 2.0 }), RECORD, where("m"));
  await refused(async () => ownerSet.report(await planWith({ longitudinal: 1.5 }), RECORD, where("n")),
                "is below this device's floor, 2 x");
  for (const bad of [0.5, NaN, Infinity, "4", true]) {
    await refused(() => device(1.0, 10.0, { minLongitudinalRatio: bad as number }),
                  "min_longitudinal_ratio must be", DPMarginalsError);
  }
});

test("no two servers see one permanent response", async () => {
  // longitudinal = epsilon (the owner lowered the floor to 1): a memoized report is its
  // permanent response itself
  const phone = await device(1.0, 100.0, { minLongitudinalRatio: 1 });
  const plan = await planWith({ longitudinal: 1.0 });
  const payload = async (origin: string, campaign: string) =>
    JSON.stringify((await phone.report(plan, RECORD, { origin, campaign, group: 1 })).payload);
  const same = new Set([await payload(ORIGIN, "w0"), await payload(ORIGIN, "w1"), await payload(ORIGIN, "w2")]);
  assert.equal(same.size, 1);
  assert.equal(total(phone), 3);
  const others: string[] = [];
  for (let i = 0; i < 8; i++) others.push(await payload(`https://other${i}.example`, "w0"));
  assert.equal(total(phone), 11); // each server's family charged as its own
  // each fresh 15-bit OUE response equals the first w.p. < 0.011: 4 of 8 w.p. < 1e-6
  assert.ok(others.filter((o) => same.has(o)).length <= 3);
});
