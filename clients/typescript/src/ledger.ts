// The device's privacy ledger (src/dpmarginals/protocol/ledger.py), the same JSON document
// as the Python client's, on a pluggable store: what the device saw (campaigns pinned to
// plans), reported (one report per campaign), memoized (permanent responses) and spent
// (charges, summed as exact rationals of the float budgets; a memoized family's reports
// cost together min(their sum, R x longitudinal epsilon), R its possible permanent
// responses, so the charge never reads the value).  A store that cannot be read or parsed
// is an error naming it: the ledger is never reset silently.
import { DPMarginalsError, LedgerError, PlanRefused } from "./errors.js";
import { type Rational, ZERO, add, cmp, fromNumber, minR, mul, rat, sub, toNumber } from "./exact.js";
import { type Json, type JsonObject, floatAt, isInt, isObject, parseJson, stringify } from "./json.js";
import { pyFormatG, pyr } from "./pyformat.js";

export const LEDGER_FORMAT = "dpmarginals.ledger";
export const LEDGER_VERSION = 3;
const REPORT_KEYS = ["group", "payload", "plan_hash", "report_id", "version"];
const PHASE = /^(.+)\.phase([0-9]+)$/;

/** The family a permanent response's key (`family:value`) belongs to. */
export function familyOf(permanent: string): string {
  return permanent.slice(0, permanent.lastIndexOf(":"));
}

/** A version-2 ledger (charges per value) as version 3: each report charged in full (what
 *  it cost under any rule), the permanent responses (the user's values) forgotten. */
function upgrade(data: Json): void {
  if (isObject(data) && data["version"] === 2) {
    data["version"] = LEDGER_VERSION;
    if (isObject(data["permanent"])) data["permanent"] = {};
    const charges = data["charges"];
    if (Array.isArray(charges)) for (const event of charges) if (isObject(event)) event["permanent"] = null;
  }
}

/** The most permanent responses a family may hold (beyond it: stored as null, charged in
 *  full): JSON numbers keep integers exactly up to here in every language. */
export const MAX_RESPONSES = 2 ** 53 - 1;

const own = (o: object, key: string): boolean => Object.prototype.hasOwnProperty.call(o, key);

/** Where a ledger lives.  `write` must replace the whole document atomically; `lock`
 *  (optional) makes a check-then-charge exclusive across processes, tabs and workers. */
export interface LedgerStore {
  /** for messages: "ledger '/path/ledger.json'" */
  readonly name: string;
  /** the document, or null when there is none yet (a new device) */
  read(): Promise<string | null>;
  write(text: string): Promise<void>;
  lock?<T>(body: () => Promise<T>): Promise<T>;
}

/** A ledger held in memory (tests, demos: forgotten when the page closes). */
export class MemoryStore implements LedgerStore {
  readonly name = "ledger (in memory)";
  private text: string | null = null;
  async read(): Promise<string | null> { return this.text; }
  async write(text: string): Promise<void> { this.text = text; }
}

interface Locks { request<T>(name: string, body: () => Promise<T>): Promise<T> }

function webLock<T>(name: string, body: () => Promise<T>): Promise<T> {
  const locks = (globalThis as { navigator?: { locks?: Locks } }).navigator?.locks;
  return locks ? locks.request(name, body) : body();
}

/** The browser's localStorage (one key; setItem replaces it at once).  Tabs and workers
 *  of one origin take turns through the Web Locks API where it exists. */
export class LocalStorageStore implements LedgerStore {
  readonly name: string;
  constructor(readonly key = "dpmarginals.ledger",
              private readonly storage: Storage = (globalThis as { localStorage?: Storage }).localStorage!) {
    if (!storage) throw new LedgerError("this platform has no localStorage");
    this.name = `ledger localStorage[${pyr(key)}]`;
  }
  async read(): Promise<string | null> { return this.storage.getItem(this.key); }
  async write(text: string): Promise<void> {
    try {
      this.storage.setItem(this.key, text);
    } catch (exc) {
      throw new LedgerError(`cannot write ${this.name}: ${(exc as Error).message}`);
    }
  }
  lock<T>(body: () => Promise<T>): Promise<T> { return webLock(`dpmarginals:${this.key}`, body); }
}

function request<T>(req: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

/** IndexedDB (works in web workers too): one record, replaced in one transaction. */
export class IndexedDBStore implements LedgerStore {
  readonly name: string;
  private db: Promise<IDBDatabase> | null = null;
  constructor(readonly database = "dpmarginals", readonly key = "ledger") {
    this.name = `ledger IndexedDB ${pyr(`${database}/${key}`)}`;
  }
  private open(): Promise<IDBDatabase> {
    if (!this.db) {
      const factory = (globalThis as { indexedDB?: IDBFactory }).indexedDB;
      if (!factory) throw new LedgerError("this platform has no IndexedDB");
      const req = factory.open(this.database, 1);
      req.onupgradeneeded = () => req.result.createObjectStore("ledger");
      this.db = request(req);
    }
    return this.db;
  }
  private async transact<T>(mode: IDBTransactionMode, op: (s: IDBObjectStore) => IDBRequest<T>): Promise<T> {
    const db = await this.open();
    const tx = db.transaction("ledger", mode);
    const out = request(op(tx.objectStore("ledger")));
    await new Promise<void>((resolve, reject) => {
      tx.oncomplete = () => resolve();
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error);
    });
    return out;
  }
  async read(): Promise<string | null> {
    const v = await this.transact("readonly", (s) => s.get(this.key));
    return typeof v === "string" ? v : null;
  }
  async write(text: string): Promise<void> {
    try {
      await this.transact("readwrite", (s) => s.put(text, this.key));
    } catch (exc) {
      throw new LedgerError(`cannot write ${this.name}: ${(exc as Error)?.message}`);
    }
  }
  lock<T>(body: () => Promise<T>): Promise<T> {
    return webLock(`dpmarginals:${this.database}/${this.key}`, body);
  }
}

/** The collection a campaign id belongs to: X for X.phase2, X.phase3, ...; else itself. */
export function campaignRoot(campaign: string): string {
  const m = PHASE.exec(campaign);
  return m && Number(m[2]) >= 2 ? m[1]! : campaign;
}

export interface CampaignEntry {
  plan_hash: string;
  root: string;
  report: JsonObject | null;
  pinned_at?: number;
  /** the ticket the report was sent with: a resend carries it again */
  ticket?: string;
}

interface Data {
  format: string;
  version: number;
  campaigns: Record<string, CampaignEntry>;
  groups: Record<string, number>;
  /** responses: R, how many permanent responses the family can hold (null: charged in full) */
  permanent: Record<string, { response: Json; longitudinal: number; responses: number | null }>;
  charges: { time: number; campaign: string; epsilon: number; permanent: string | null }[];
}

function empty(): Data {
  return { format: LEDGER_FORMAT, version: LEDGER_VERSION, campaigns: {}, groups: {},
           permanent: {}, charges: [] };
}

const mutexes = new WeakMap<object, Promise<unknown>>();

/** Run `body` after every earlier body on the same key in this JS context. */
function serialized<T>(key: object, body: () => Promise<T>): Promise<T> {
  const before = mutexes.get(key) ?? Promise.resolve();
  const run = before.then(body, body);
  mutexes.set(key, run.then(() => undefined, () => undefined));
  return run;
}

export class Ledger {
  private data: Data = empty();

  private constructor(readonly store: LedgerStore | null, readonly clock: () => number) {}

  /** The ledger of `store` (null: in memory), read and checked now. */
  static async open(store: LedgerStore | null, clock: () => number = () => Date.now() / 1000): Promise<Ledger> {
    const ledger = new Ledger(store, clock);
    await ledger.reload();
    return ledger;
  }

  private where(): string {
    return this.store?.name ?? "ledger (in memory)";
  }

  private corrupt(why: string): LedgerError {
    return new LedgerError(`${this.where()} is corrupt (${why}); it records the privacy budget `
                           + "already spent: restore it from a backup (deleting it forgets that budget)");
  }

  /** Read the store again (another process, tab or worker may have written it). */
  async reload(): Promise<void> {
    if (this.store === null) return;
    let text: string | null;
    try {
      text = await this.store.read();
    } catch (exc) {
      if (exc instanceof LedgerError) throw exc;
      throw new LedgerError(`cannot read ${this.where()}: ${(exc as Error)?.message ?? exc}`);
    }
    if (text === null) { this.data = empty(); return; }
    let data: Json;
    try {
      data = parseJson(text);
    } catch (exc) {
      throw this.corrupt(`not JSON: ${(exc as Error).message}`);
    }
    upgrade(data);
    this.validate(data);
    this.data = data as unknown as Data;
  }

  /** Hold the store's lock (and this context's), read it afresh, run `body`. */
  locked<T>(body: () => Promise<T>): Promise<T> {
    const inner = async () => { await this.reload(); return body(); };
    return serialized(this.store ?? this, () => (this.store?.lock ? this.store.lock(inner) : inner()));
  }

  private number(container: object, key: string, field: string): void {
    const v = (container as Record<string, unknown>)[key];
    if (typeof v !== "number" && typeof v !== "bigint") throw this.corrupt(`${field} must be a number, got ${pyr(v)}`);
    if (!(Number.isFinite(Number(v)) && Number(v) >= 0)) {
      throw this.corrupt(`${field} must be a finite number >= 0, got ${pyr(v, floatAt(container, key))}`);
    }
  }

  private validate(data: Json): void {
    if (!isObject(data) || data["format"] !== LEDGER_FORMAT) throw this.corrupt(`not a ${LEDGER_FORMAT} object`);
    if (data["version"] !== LEDGER_VERSION) {
      throw this.corrupt(`version ${pyr(data["version"] ?? null)} is not one this dpmarginals `
                         + `reads (2 or ${LEDGER_VERSION})`);
    }
    const { campaigns, groups, permanent, charges } = data;
    if (!(isObject(campaigns) && isObject(groups) && isObject(permanent) && Array.isArray(charges))) {
      throw this.corrupt("'campaigns', 'groups', 'permanent' must be objects and 'charges' a list");
    }
    if (!Object.keys(groups).every((k) => isInt(groups, k) && Number(groups[k]) >= 0)) {
      throw this.corrupt("'groups' must map plan hashes to group indices");
    }
    for (const key of Object.keys(campaigns)) {
      const entry = campaigns[key];
      const report = isObject(entry) ? entry["report"] : null;
      const ok = isObject(entry) && typeof entry["plan_hash"] === "string"
        && typeof entry["root"] === "string"
        && (report === null || report === undefined
            || (isObject(report) && Object.keys(report).sort().join() === REPORT_KEYS.join()
                && report["plan_hash"] === entry["plan_hash"]))
        && (entry["ticket"] === null || entry["ticket"] === undefined || typeof entry["ticket"] === "string");
      if (!ok) throw this.corrupt(`campaign ${pyr(key)} is malformed`);
    }
    for (const key of Object.keys(permanent)) {
      const memo = permanent[key];
      if (!(isObject(memo) && "response" in memo)) throw this.corrupt(`permanent response ${pyr(key)} is malformed`);
      this.number(memo, "longitudinal", `permanent[${pyr(key)}].longitudinal`);
      if (!own(memo, "responses")) throw this.corrupt(`permanent[${pyr(key)}].responses is missing`);
      const responses = memo["responses"];
      if (!(responses === null
            || (isInt(memo, "responses") && Number(responses) >= 2 && Number(responses) <= MAX_RESPONSES))) {
        throw this.corrupt(`permanent[${pyr(key)}].responses must be a count in 2..2^53 - 1 or null, `
                           + `got ${pyr(responses, floatAt(memo, "responses"))}`);
      }
    }
    charges.forEach((event, i) => {
      if (!(isObject(event) && typeof event["campaign"] === "string"
            && (event["permanent"] === null || event["permanent"] === undefined
                || (typeof event["permanent"] === "string" && own(permanent, event["permanent"]))))) {
        throw this.corrupt(`charges[${i}] is malformed`);
      }
      this.number(event, "epsilon", `charges[${i}].epsilon`);
      this.number(event, "time", `charges[${i}].time`);
    });
  }

  private async write(data: Data): Promise<void> {
    if (this.store !== null) {
      try {
        await this.store.write(stringify(data, true) + "\n");
      } catch (exc) {
        if (exc instanceof LedgerError) throw exc;
        throw new LedgerError(`cannot write ${this.where()}: ${(exc as Error)?.message ?? exc}`);
      }
    }
    this.data = data;
  }

  private copy(): Data {
    return parseJson(stringify(this.data)) as unknown as Data;
  }

  // -- what was spent --------------------------------------------------------------------
  /** What all reports of `permanent`'s family may cost together (null: each is charged in
   *  full): R x its longitudinal epsilon. */
  private familyCap(permanent: string | null): Rational | null {
    const memo = permanent === null ? undefined : this.data.permanent[permanent];
    if (memo === undefined || memo.responses === null) return null;
    return mul(rat(BigInt(memo.responses)), fromNumber(Number(memo.longitudinal)));
  }

  /** (time, charge) of every report event, in the order they were made. */
  private eventCharges(): [number, Rational][] {
    const used = new Map<string, Rational>();
    return this.data.charges.map((event) => {
      const eps = fromNumber(Number(event.epsilon));
      const memo = event.permanent ?? null;
      const cap = this.familyCap(memo);
      if (memo === null || cap === null) return [Number(event.time), eps];
      const before = used.get(familyOf(memo)) ?? ZERO;
      used.set(familyOf(memo), add(before, eps));
      return [Number(event.time), sub(minR(add(before, eps), cap), minR(before, cap))];
    });
  }

  /** Epsilon spent over the device's life, exactly. */
  total(): Rational {
    return this.eventCharges().reduce((a, [, c]) => add(a, c), ZERO);
  }

  /** Epsilon charged after time `since` (a window (since, now]). */
  spentSince(since: number): Rational {
    return this.eventCharges().reduce((a, [t, c]) => (t > since ? add(a, c) : a), ZERO);
  }

  /** What a report at per-report `epsilon` would add now to what its `family`'s reports
   *  cost (null: not memoized), whose reports may cost `cap` together (null: charged in
   *  full).  The value is not an argument: the charge cannot depend on it. */
  charge(family: string | null, epsilon: number, cap: Rational | null = null): Rational {
    const eps = fromNumber(epsilon);
    if (family === null || cap === null) return eps;
    let before = ZERO;
    for (const e of this.data.charges) {
      if (e.permanent === null || e.permanent === undefined || familyOf(e.permanent) !== family) continue;
      const stored = this.familyCap(e.permanent);
      if (stored !== null && cmp(stored, cap) !== 0) { // R and L are the family's: an edit
        throw this.corrupt(`permanent[${pyr(e.permanent)}] allows ${pyFormatG(toNumber(stored))} for its `
                           + `family, whose plan allows ${pyFormatG(toNumber(cap))}`);
      }
      if (stored !== null) before = add(before, fromNumber(Number(e.epsilon)));
    }
    return sub(minR(add(before, eps), cap), minR(before, cap));
  }

  // -- campaigns ---------------------------------------------------------------------------
  campaign(key: string): CampaignEntry | null {
    const entry = this.data.campaigns[key];
    return entry === undefined ? null : (parseJson(stringify(entry)) as unknown as CampaignEntry);
  }

  campaigns(): Record<string, CampaignEntry> {
    return this.copy().campaigns;
  }

  /** (internal) The campaigns' (key, root, plan hash, reported) without copying them. */
  campaignRoots(): [string, string, string, boolean][] {
    return Object.keys(this.data.campaigns).map((k) => {
      const e = this.data.campaigns[k]!;
      return [k, e.root, e.plan_hash, e.report !== null && e.report !== undefined];
    });
  }

  groupOf(planHash: string): number | null {
    const g = this.data.groups[planHash];
    return g === undefined ? null : Number(g);
  }

  permanentResponse(key: string): Json | null {
    const memo = this.data.permanent[key];
    return memo === undefined ? null : parseJson(stringify(memo.response));
  }

  /** Pin campaign `key` (of collection `root`) to `planHash` (first sight). */
  async pin(key: string, root: string, planHash: string): Promise<void> {
    const entry = this.data.campaigns[key];
    if (entry !== undefined) {
      if (entry.plan_hash !== planHash) {
        throw new PlanRefused(`plan refused: campaign ${pyr(key)} is pinned to plan `
                              + `${entry.plan_hash.slice(0, 12)}, not ${planHash.slice(0, 12)}`);
      }
      return;
    }
    const entry2: CampaignEntry = { plan_hash: planHash, root, report: null, pinned_at: this.clock() };
    await this.write({ ...this.data, campaigns: { ...this.data.campaigns, [key]: entry2 } });
  }

  /** Store `report` as campaign `key`'s one report and charge it, in one atomic write,
   *  before the report leaves the device. */
  async record(key: string, report: JsonObject, epsilon: number,
               permanent: [string, Json, number, number | null] | null): Promise<void> {
    const entry = this.data.campaigns[key];
    if (entry === undefined || (entry.report !== null && entry.report !== undefined)) {
      throw new DPMarginalsError(`campaign ${pyr(key)} is not pinned, or already reported`);
    }
    const planHash = String(report["plan_hash"]);
    const group = Number(report["group"]);
    const known = this.data.groups[planHash] ?? group;
    if (Number(known) !== group) {
      throw new DPMarginalsError(`plan ${planHash.slice(0, 12)} is reported in group ${known}, not ${group}`);
    }
    // a new document sharing what is unchanged (nothing is changed in place)
    const data: Data = { ...this.data, groups: { ...this.data.groups, [planHash]: known },
                         campaigns: { ...this.data.campaigns, [key]: { ...entry, report: { ...report } } },
                         charges: [...this.data.charges] };
    let memo: string | null = null;
    if (permanent !== null) {
      const [memoKey, response, longitudinal, responses] = permanent;
      memo = memoKey;
      if (!own(data.permanent, memoKey)) {
        data.permanent = { ...data.permanent, [memoKey]: { response, longitudinal, responses } };
      }
    }
    data.charges.push({ time: this.clock(), campaign: key, epsilon, permanent: memo });
    await this.write(data);
  }

  /** Keep the ticket campaign `key`'s report is sent with: a later resend carries it
   *  again, so a service that requires tickets answers that it holds the report (a
   *  duplicate, delivered) instead of refusing a report without its ticket. */
  async keepTicket(key: string, ticket: string): Promise<void> {
    const entry = this.data.campaigns[key];
    if (entry === undefined || entry.report === null || entry.report === undefined) {
      throw new DPMarginalsError(`campaign ${pyr(key)} has no report to keep a ticket for`);
    }
    if (entry.ticket === ticket) return;
    await this.write({ ...this.data, campaigns: { ...this.data.campaigns, [key]: { ...entry, ticket } } });
  }

  /** The raw document (a copy): for inspection and tests. */
  document(): Record<string, unknown> {
    return this.copy() as unknown as Record<string, unknown>;
  }
}
