// The device: one user's rules, enforced from her own ledger whatever the server sends
// (src/dpmarginals/protocol/device.py; docs/device-spec.md §5).  One report, in this
// order, nothing random drawn before step 6:
//   1. the plan's checks against maxEpsilon, and a memoized plan's longitudinal epsilon at
//      least minLongitudinalRatio x its epsilon (nearer, a family's reports link);
//   2. pinning: the campaign (origin + id) keeps the plan it first showed; a campaign
//      already reported gives back its stored report (no charge, no draw);
//   3. one phase per collection (X, X.phase2, ...), chained by params.earlier_hashes;
//   4. the group: the one kept for this plan, else the server's, else uniform;
//   5. the charge (memoized: what the report adds to its family's min(sum, R x longitudinal
//      epsilon), R the permanent responses the family can hold: its values and the
//      substitute) against maxTotalEpsilon and the period cap.  It reads the family, never
//      the value: a refusal (which the server sees) cannot tell whether the value changed;
//   6. the randomization (crypto.getRandomValues only); a value the plan's domain cannot
//      encode is reported as a uniformly random value of the group's attributes, charged
//      as any report (onWarning tells the app, locally, once the report is made; an
//      onWarning that throws cannot take it back): a refusal would tell the server
//      the value lies outside the domain it chose (memoized: one substitute per family);
//   7. the report, its charge and any new permanent response, written to the ledger
//      atomically before the report is returned.
import { checkPlan, deviceCap, longitudinalFloor } from "./checks.js";
import { recordRow } from "./domain.js";
import { BudgetExceeded, DPMarginalsError, LedgerError, RecordValueError, refused } from "./errors.js";
import { type Rational, add, cmp, fromNumber, mul, rat, sub, toNumber } from "./exact.js";
import { type Format, type Input, type Payload, groupFormat } from "./formats.js";
import { type Json, type JsonObject, canonical } from "./json.js";
import { Ledger, type LedgerStore, MAX_RESPONSES, campaignRoot } from "./ledger.js";
import type { Plan } from "./plan.js";
import { PyFloat, pyFormatG, pyr } from "./pyformat.js";
import { SecureWords, randomHex } from "./random.js";
import { WordDraws } from "./samplers.js";
import { sha256Hex } from "./sha256.js";

export const DAY = 86400;
/** The value key a group's substituted values are memoized under (one per family). */
export const SUBSTITUTE = "substitute";
export const REPORT_VERSION = 1;
const SLACK: Rational = rat(1n, 1n << 40n);
/** The least longitudinal / per-report epsilon a device accepts unless its owner sets
 *  another: the service's default (docs/device-spec.md §4 tabulates what each ratio links). */
export const MIN_LONGITUDINAL_RATIO = 4;

/** A report as the service takes it: exactly these five fields. */
export interface Report {
  version: number;
  plan_hash: string;
  group: number;
  payload: Payload;
  report_id: string;
  [key: string]: unknown;
}

export interface DeviceCaps {
  /** what one report may reveal (required; at most 20) */
  maxEpsilon: number;
  /** what this device ever spends (required) */
  maxTotalEpsilon: number;
  /** what it spends in any window of periodSeconds (optional) */
  maxPeriodEpsilon?: number | null;
  /** the period's length in seconds (default: a day) */
  periodSeconds?: number;
  /** seconds since the epoch (default: Date.now() / 1000) */
  clock?: () => number;
  /** the least longitudinal / per-report epsilon of a memoized plan this device accepts
   *  (default MIN_LONGITUDINAL_RATIO, 4; at least 1): nearer 1, the reports of a family to
   *  one server are nearly its permanent response, one identifier (docs/device-spec.md §4) */
  minLongitudinalRatio?: number;
  /** false: keep no permanent response; every report of a memoized plan draws a fresh one
   *  (the same composed law: the server's estimates are unchanged), charged its epsilon in
   *  full and linked to no other report, so whether and when the value changed is protected
   *  like the value (docs/device-spec.md §4); default true (RAPPOR's memoization) */
  memoize?: boolean;
  /** told when the device keeps its group instead of the server's, or reports a random value
   *  for one its plan cannot encode (default console.warn; never sent) */
  onWarning?: (message: string) => void;
}

/** The permanent responses a group's reports share: the server's origin, the group's
 *  attributes (with their declared values), oracle(s) and longitudinal epsilon, hashed (32
 *  hex digits): no two servers see one permanent response. */
export async function family(plan: Plan, group: number, origin: string): Promise<string> {
  const spec = plan.groups[group]!;
  const body: Record<string, unknown> = {
    origin,
    attributes: spec.attributes.map((a) => [a, plan.domain.spec(a)]),
    oracle: spec.oracle,
    longitudinal_epsilon: plan.longitudinal === null ? null : new PyFloat(plan.longitudinal),
  };
  if (spec.oracle === "em") {
    const names = (plan.params["attribute_oracles"] ?? []) as Json[];
    body["attribute_oracles"] = spec.attributes.map((a) => names[plan.domain.index(a)]);
  }
  return (await sha256Hex(canonical(body))).slice(0, 32);
}

/** R: how many permanent responses `group`'s family can ever hold, one per value of its
 *  attributes and the substitute's (null beyond 2^53 - 1, a count JSON numbers do not keep:
 *  such a family's reports are charged in full). */
export function familyResponses(plan: Plan, group: number): number | null {
  const count = plan.groups[group]!.attributes
    .reduce((a, name) => a * BigInt(plan.domain.size(name)), 1n) + 1n;
  return count <= BigInt(MAX_RESPONSES) ? Number(count) : null;
}

/** One integer per distinct input: the cell, or em's values in mixed radix. */
function valueKey(input: Input, sizes: number[]): string {
  const flat = Array.isArray(input) ? input : [input];
  if (flat.length === 1) return String(flat[0]);
  let key = 0n;
  flat.forEach((v, j) => { key = key * BigInt(sizes[j]!) + BigInt(v); });
  return key.toString();
}

/** A stored report in the fields' order (a ledger keeps its keys sorted). */
function asReport(stored: JsonObject): Report {
  const { version, plan_hash, group, payload, report_id } = stored;
  return { version, plan_hash, group, payload, report_id } as Report;
}

function capText(x: number): string {
  return pyFormatG(x);
}

export class Device {
  readonly maxEpsilon: number;
  readonly maxTotalEpsilon: number;
  readonly maxPeriodEpsilon: number | null;
  readonly periodSeconds: number;
  readonly minLongitudinalRatio: number;
  readonly memoize: boolean;
  private readonly warn: (message: string) => void;

  private constructor(readonly ledger: Ledger, caps: DeviceCaps) {
    this.maxEpsilon = caps.maxEpsilon;
    this.maxTotalEpsilon = caps.maxTotalEpsilon;
    this.maxPeriodEpsilon = caps.maxPeriodEpsilon ?? null;
    this.periodSeconds = caps.periodSeconds ?? DAY;
    this.minLongitudinalRatio = caps.minLongitudinalRatio ?? MIN_LONGITUDINAL_RATIO;
    this.memoize = caps.memoize ?? true;
    this.warn = caps.onWarning ?? ((m) => console.warn(m));
  }

  /** A device over `store` (null: in memory) with its owner's caps, all checked now
   *  (maxTotalEpsilon is required), and its ledger read and checked now. */
  static async open(store: LedgerStore | null, caps: DeviceCaps): Promise<Device> {
    if (typeof caps !== "object" || caps === null) {
      throw new DPMarginalsError("a device needs its caps: {maxEpsilon, maxTotalEpsilon}");
    }
    deviceCap(caps.maxEpsilon, "max_epsilon");
    deviceCap(caps.maxTotalEpsilon, "max_total_epsilon");
    if (caps.maxPeriodEpsilon !== undefined && caps.maxPeriodEpsilon !== null) {
      deviceCap(caps.maxPeriodEpsilon, "max_period_epsilon");
    }
    deviceCap(caps.periodSeconds ?? DAY, "period_seconds");
    longitudinalFloor(caps.minLongitudinalRatio ?? MIN_LONGITUDINAL_RATIO);
    if (caps.memoize !== undefined && typeof caps.memoize !== "boolean") {
      throw new DPMarginalsError(`memoize must be true or false, got ${pyr(caps.memoize)}`);
    }
    const ledger = await Ledger.open(store, caps.clock);
    return new Device(ledger, caps);
  }

  private now(): number {
    return this.ledger.clock();
  }

  // -- the checks -------------------------------------------------------------------------
  /** The plan if this device would report under it now (steps 1-3; the campaign is
   *  pinned), else PlanRefused.  Nothing random is drawn. */
  accept(plan: unknown, where: { origin: string; campaign: string }): Promise<Plan> {
    return this.ledger.locked(async () => (await this.acceptUnlocked(plan, where.origin, where.campaign))[0]);
  }

  private async acceptUnlocked(source: unknown, origin: string, campaign: string
  ): Promise<[Plan, string, JsonObject | null]> {
    if (typeof campaign !== "string" || !campaign) {
      throw new DPMarginalsError(`a campaign id is required, got ${pyr(campaign)}`);
    }
    if (typeof origin !== "string" || !origin) {
      throw new DPMarginalsError(`the server's origin is required, got ${pyr(origin)}`);
    }
    const plan = await checkPlan(source, this.maxEpsilon);
    const floor = mul(fromNumber(this.minLongitudinalRatio), fromNumber(plan.epsilon));
    if (this.memoize && plan.longitudinal !== null // kept responses are what link
        && cmp(fromNumber(plan.longitudinal), mul(floor, sub({ n: 1n, d: 1n }, SLACK))) < 0) {
      throw refused(`longitudinal_epsilon = ${pyFormatG(plan.longitudinal)} is below this device's `
                    + `floor, ${pyFormatG(this.minLongitudinalRatio)} x epsilon = `
                    + `${pyFormatG(toNumber(floor))}: its reports would link across campaigns `
                    + "(min_longitudinal_ratio)");
    }
    const key = `${origin}|${campaign}`;
    const root = `${origin}|${campaignRoot(campaign)}`;
    const entry = this.ledger.campaign(key);
    if (entry !== null && entry.plan_hash !== plan.hash) {
      throw refused(`campaign ${pyr(campaign)} at ${origin} is pinned to plan `
                    + `${entry.plan_hash.slice(0, 12)} (first seen), the server now shows ${plan.hash.slice(0, 12)}`);
    }
    if (entry !== null && entry.report !== null && entry.report !== undefined) {
      return [plan, key, entry.report];
    }
    const siblings = this.ledger.campaignRoots().filter(([k, r]) => r === root && k !== key);
    const done = siblings.filter(([, , , reported]) => reported).map(([k]) => k).sort();
    if (done.length) {
      throw refused(`this device reported in ${pyr(done[0]!.split("|").slice(1).join("|"))}, a phase `
                    + `of the same collection as ${pyr(campaign)}: each user reports in one phase`);
    }
    const chained = new Set(plan.earlierHashes().map((h) => (typeof h === "string" ? h : pyr(h))));
    const unchained = siblings.map(([, , h]) => h).filter((h) => !chained.has(h)).sort();
    if (unchained.length) {
      throw refused(`campaign ${pyr(campaign)} does not chain from the plan ${unchained[0]!.slice(0, 12)} `
                    + "this device pinned for its collection (params.earlier_hashes must name it)");
    }
    await this.ledger.pin(key, root, plan.hash);
    return [plan, key, null];
  }

  private checkCaps(charge: Rational): void {
    const total = this.ledger.total();
    const slack = add({ n: 1n, d: 1n }, SLACK);
    if (cmp(add(total, charge), mul(fromNumber(this.maxTotalEpsilon), slack)) > 0) {
      throw new BudgetExceeded(`max_total_epsilon = ${capText(this.maxTotalEpsilon)} refuses this `
                               + `report: spent ${capText(toNumber(total))} + ${capText(toNumber(charge))} > `
                               + capText(this.maxTotalEpsilon));
    }
    if (this.maxPeriodEpsilon !== null) {
      const recent = this.ledger.spentSince(this.now() - this.periodSeconds);
      if (cmp(add(recent, charge), mul(fromNumber(this.maxPeriodEpsilon), slack)) > 0) {
        throw new BudgetExceeded(`max_period_epsilon = ${capText(this.maxPeriodEpsilon)} per `
                                 + `${capText(this.periodSeconds)} s refuses this report: spent `
                                 + `${capText(toNumber(recent))} in the period + ${capText(toNumber(charge))} > `
                                 + capText(this.maxPeriodEpsilon));
      }
    }
  }

  /** The report this device already made for the campaign (with the ticket it was sent
   *  with, if the ledger kept one), or null. */
  storedReport(where: { origin: string; campaign: string }): Report | null {
    const entry = this.ledger.campaign(`${where.origin}|${where.campaign}`);
    if (!entry?.report) return null;
    const report = asReport(entry.report);
    if (typeof entry.ticket === "string") report["ticket"] = entry.ticket;
    return report;
  }

  /** The group's input from the record and null, or null and why when the plan's domain
   *  cannot encode one of its values: the report then carries a random one. */
  private inputOf(plan: Plan, g: number, record: unknown): [Input | null, string | null] {
    const spec = plan.groups[g]!;
    let row: number[];
    try {
      row = recordRow(plan.domain, record, spec.attributes);
    } catch (e) {
      if (!(e instanceof RecordValueError)) throw e;
      return [null, `${e.message}: reported as a uniformly random value of `
                    + `${pyr(spec.attributes)} (plan ${plan.hash.slice(0, 12)})`];
    }
    return [groupFormat(plan, g).encode(spec.attributes.map((a) => row[plan.domain.index(a)]!)), null];
  }

  /** A uniformly random input of the group (OS entropy): a substitute. */
  private randomInput(plan: Plan, g: number, fmt: Format, draws: WordDraws): Input {
    return fmt.encode(plan.groups[g]!.attributes.map((a) => draws.uniform(plan.domain.size(a))));
  }

  private async memoKey(plan: Plan, g: number, input: Input | null, origin: string): Promise<string | null> {
    if (plan.longitudinal === null) return null;
    if (input === null) return `${await family(plan, g, origin)}:${SUBSTITUTE}`;
    const sizes = plan.groups[g]!.attributes.map((a) => plan.domain.size(a));
    return `${await family(plan, g, origin)}:${valueKey(input, sizes)}`;
  }

  /** Raise BudgetExceeded unless the caps can pay for a report to `origin` in `group`
   *  (null: any group, at the worst case, the plan's epsilon).  Nothing is drawn, and no
   *  record is needed: the charge never depends on the value. */
  async checkCharge(plan: Plan, group: number | null, origin: string): Promise<void> {
    if (group !== null && !(group >= 0 && group < plan.m)) {
      throw new LedgerError(`the ledger keeps group ${group} for plan ${plan.hash.slice(0, 12)}, `
                            + `which has ${plan.m} groups`);
    }
    this.checkCaps(group === null ? fromNumber(plan.epsilon) : await this.charge(plan, group, origin));
  }

  /** What a report in `group` to `origin` adds to the device's spending: its epsilon, or
   *  for a memoized plan what it adds to its family's cost (step 5). */
  private async charge(plan: Plan, group: number, origin: string): Promise<Rational> {
    if (plan.longitudinal === null || !this.memoize) return fromNumber(plan.epsilon);
    const responses = familyResponses(plan, group);
    const cap = responses === null ? null : mul(rat(BigInt(responses)), fromNumber(plan.longitudinal));
    return this.ledger.charge(await family(plan, group, origin), plan.epsilon, cap);
  }

  // -- one report --------------------------------------------------------------------------
  /** This device's report for `campaign` at `origin`; `group` is the server's assignment
   *  (ignored, with a warning, when the device keeps another group for this plan). */
  report(plan: unknown, record: unknown,
         where: { origin: string; campaign: string; group?: number | null }): Promise<Report> {
    return this.ledger.locked(async () => {
      const [checked, key, stored] = await this.acceptUnlocked(plan, where.origin, where.campaign);
      if (stored !== null) return asReport(stored);
      return this.fresh(checked, key, record, where.group ?? null, where.origin);
    });
  }

  private async fresh(plan: Plan, key: string, record: unknown, group: number | null,
                      origin: string): Promise<Report> {
    if (!plan.m) {
      throw new DPMarginalsError(`plan of method ${pyr(plan.method)} has no groups: its users report `
                                 + "nothing, so it cannot be collected");
    }
    const kept = this.ledger.groupOf(plan.hash);
    let requested: number | null = null;
    if (group !== null) {
      if (typeof group !== "number" || !Number.isInteger(group)) {
        throw new DPMarginalsError(`group must be an integer, got ${pyr(group)}`);
      }
      if (!(group >= 0 && group < plan.m)) {
        throw new DPMarginalsError(`group ${group} is not one of the plan's groups 0..${plan.m - 1}`);
      }
      requested = group;
    }
    let g: number;
    if (kept !== null) {
      if (!(kept >= 0 && kept < plan.m)) {
        throw new LedgerError(`the ledger keeps group ${kept} for plan ${plan.hash.slice(0, 12)}, `
                              + `which has ${plan.m} groups`);
      }
      if (requested !== null && requested !== kept) {
        this.warn(`plan ${plan.hash.slice(0, 12)}: this device reports group ${kept} in every `
                  + `campaign of the plan, not the requested group ${requested}`);
      }
      g = kept;
    } else if (requested !== null) {
      g = requested;
    } else {
      this.checkCaps(fromNumber(plan.epsilon)); // the worst case, before the draw
      g = new WordDraws(new SecureWords()).uniform(plan.m);
    }
    const fmt = groupFormat(plan, g);
    const [input, substituted] = this.inputOf(plan, g, record);
    const memo = this.memoize ? await this.memoKey(plan, g, input, origin) : null;
    this.checkCaps(await this.charge(plan, g, origin));
    let keptResponse: [string, Json, number, number | null] | null = null;
    let payload: Payload;
    // a substitute is drawn only when it is used
    const value = (draws: WordDraws): Input => input ?? this.randomInput(plan, g, fmt, draws);
    if (memo === null) {
      const draws = new WordDraws(new SecureWords());
      payload = fmt.perturb(draws, value(draws));
    } else {
      let response = this.ledger.permanentResponse(memo);
      if (response !== null) {
        const why = fmt.invalid!(response);
        if (why !== null) throw new LedgerError(`the ledger's permanent response ${memo} is invalid: ${why}`);
      }
      const draws = new WordDraws(new SecureWords());
      if (response === null) response = fmt.permanent!(draws, value(draws)) as Json;
      payload = fmt.instantaneous!(draws, response as Payload);
      keptResponse = [memo, response, plan.longitudinal!, familyResponses(plan, g)];
    }
    const report: Report = { version: REPORT_VERSION, plan_hash: plan.hash, group: g, payload,
                             report_id: randomHex(16) };
    await this.ledger.record(key, report as unknown as JsonObject, plan.epsilon, keptResponse);
    if (substituted !== null) { // told once the report is made: onWarning cannot take it back
      try { this.warn(substituted); } catch { /* no report would tell the server more */ }
    }
    return report;
  }

  // -- what is left -----------------------------------------------------------------------
  /** What is left under maxTotalEpsilon (and the period cap, if set). */
  remaining(): number {
    let left = sub(fromNumber(this.maxTotalEpsilon), this.ledger.total());
    if (this.maxPeriodEpsilon !== null) {
      const recent = this.ledger.spentSince(this.now() - this.periodSeconds);
      const period = sub(fromNumber(this.maxPeriodEpsilon), recent);
      if (cmp(period, left) < 0) left = period;
    }
    return Math.max(toNumber(left), 0);
  }
}
