// Talking to a `dpmarginals serve` aggregator over fetch (src/dpmarginals/protocol/http.py):
// the plan, the assignment and its single-use ticket, reports one by one or in batches,
// with retries on a lost connection or a 429/502-504 answer (after its Retry-After, up to
// a minute; else backoff).  The report ids make retries safe: a retried batch the service
// already stored comes back as duplicates, which counts as delivered.
import { parsePlan } from "./checks.js";
import type { Device, Report } from "./device.js";
import { DPMarginalsError, PlanRefused, ServiceError } from "./errors.js";
import { type Json, isObject, parseJson, stringify } from "./json.js";
import type { Plan } from "./plan.js";
import { cut, pyr } from "./pyformat.js";

export const MAX_BATCH_REPORTS = 10000;
const RETRY_STATUSES = new Set([429, 502, 503, 504]);
const MAX_RETRY_AFTER = 60;

/** The server's origin, scheme://host[:port] (lower case, default port dropped): a device
 *  pins campaigns per origin. */
export function originOf(server: string): string {
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    throw new DPMarginalsError(`server must be an http(s) URL, got ${pyr(server)}`);
  }
  if ((url.protocol !== "http:" && url.protocol !== "https:") || !url.hostname) {
    throw new DPMarginalsError(`server must be an http(s) URL, got ${pyr(server)}`);
  }
  return `${url.protocol}//${url.hostname}${url.port ? `:${url.port}` : ""}`;
}

function retryAfter(value: string | null): number {
  if (value === null || !value.trim()) return 0;
  const seconds = Number(value);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds : 0;
}

function count(body: unknown): number {
  return isObject(body) && Array.isArray(body["reports"]) ? body["reports"].length : 1;
}

function sleep(seconds: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, seconds * 1000));
}

export interface ServiceOptions {
  /** an analyst or admin token, for status and marginals of a campaign that is not public */
  token?: string;
  /** seconds a request may take (default 30) */
  timeout?: number;
  /** retries of a lost connection or a 429/502-504 answer (default 3) */
  retries?: number;
  /** the fetch to use (default globalThis.fetch) */
  fetch?: typeof fetch;
}

/** A connection to one campaign of a `dpmarginals serve` aggregator. */
export class ServiceClient {
  readonly server: string;
  readonly timeout: number;
  readonly retries: number;
  private readonly token: string | undefined;
  private readonly fetcher: typeof fetch;
  private readonly base: string;
  private cachedPlan: Plan | null = null;
  private readonly tickets = new Map<number, string[]>();
  /** the last answer's headers (lower-case names) */
  lastHeaders: Record<string, string> = {};

  constructor(server: string, readonly campaign: string, options: ServiceOptions = {}) {
    originOf(server);
    this.server = server.replace(/\/+$/, "");
    this.base = new URL(this.server).pathname.replace(/\/+$/, "");
    this.token = options.token;
    this.timeout = options.timeout ?? 30;
    this.retries = options.retries ?? 3;
    const f = options.fetch ?? (globalThis as { fetch?: typeof fetch }).fetch;
    if (!f) throw new DPMarginalsError("this platform has no fetch (Node >= 18, a browser, a worker)");
    this.fetcher = (input, init) => f.call(globalThis, input, init); // fetch needs its global
  }

  /** The server's origin: a device pins campaigns per origin. */
  get origin(): string {
    return originOf(this.server);
  }

  private path(suffix = "", query?: Record<string, string | number>): string {
    const q = query ? `?${new URLSearchParams(Object.entries(query).map(([k, v]) => [k, String(v)]))}` : "";
    return `${this.base}/campaigns/${encodeURIComponent(this.campaign)}${suffix}${q}`;
  }

  /** One request with retries: [status, parsed JSON (or text)]. */
  async request(method: string, path: string, body?: unknown,
                { admin = false, raw = false } = {}): Promise<[number, Json | string]> {
    const data = body === undefined ? undefined : stringify(body);
    const headers: Record<string, string> = { Accept: "application/json" };
    if (data !== undefined) headers["Content-Type"] = "application/json";
    if (admin) {
      if (!this.token) throw new DPMarginalsError("this request needs a token (options.token)");
      headers["Authorization"] = `Bearer ${this.token}`;
    }
    const url = new URL(this.server).origin + path;
    let last: unknown = null;
    let wait = 0;
    for (let attempt = 0; attempt <= this.retries; attempt++) {
      if (attempt) {
        await sleep(wait || Math.min(0.2 * 2 ** (attempt - 1), 2));
        wait = 0;
      }
      let status: number;
      let text: string;
      const abort = new AbortController();
      const timer = setTimeout(() => abort.abort(), this.timeout * 1000);
      try {
        const resp = await this.fetcher(url, { method, headers, body: data, signal: abort.signal });
        text = await resp.text();
        status = resp.status;
        this.lastHeaders = {};
        resp.headers.forEach((v, k) => { this.lastHeaders[k.toLowerCase()] = v; });
      } catch (exc) {
        last = exc;
        continue;
      } finally {
        clearTimeout(timer);
      }
      if (RETRY_STATUSES.has(status) && attempt < this.retries) {
        last = new ServiceError(status, "unavailable", text.slice(0, 200));
        wait = retryAfter(this.lastHeaders["retry-after"] ?? null);
        if (wait <= MAX_RETRY_AFTER) continue;
      }
      if (raw && status < 400) return [status, text];
      let parsed: Json | string;
      try {
        parsed = text ? parseJson(text) : null;
      } catch {
        parsed = text;
      }
      if (status >= 400) {
        const err = ServiceClient.error(status, parsed);
        if (attempt && ServiceClient.allDuplicates(err, body)) {
          return [200, { accepted: 0, already_stored: count(body) }];
        }
        throw err;
      }
      return [status, parsed];
    }
    throw new DPMarginalsError(`cannot reach ${this.server}: ${(last as Error)?.message ?? last}`);
  }

  private static error(status: number, parsed: Json | string): ServiceError {
    if (isObject(parsed) && "error" in parsed) {
      return new ServiceError(status, String(parsed["error"]), String(parsed["reason"] ?? ""), parsed);
    }
    if (isObject(parsed) && "detail" in parsed) {
      return new ServiceError(status, "invalid_request", cut(stringify(parsed["detail"]), 500), parsed);
    }
    return new ServiceError(status, "error", cut(typeof parsed === "string" ? parsed : stringify(parsed), 500), parsed);
  }

  private static allDuplicates(err: ServiceError, body: unknown): boolean {
    if (err.status !== 409 || err.code !== "duplicate_report" || !isObject(err.body)) return false;
    const dup = err.body["duplicates"];
    return (Array.isArray(dup) ? dup.length : 0) === count(body);
  }

  // -- the campaign ---------------------------------------------------------------------
  /** The campaign's public plan (its hash must be present and match its content). */
  async plan(refresh = false): Promise<Plan> {
    if (this.cachedPlan === null || refresh) {
      const [, body] = await this.request("GET", this.path("/plan"));
      if (!isObject(body)) {
        throw new PlanRefused(`plan refused: the server's plan is not a JSON object: ${pyr(cut(String(body), 80))}`);
      }
      this.cachedPlan = await parsePlan(body);
    }
    return this.cachedPlan;
  }

  private keep(groups: Json[], tickets: Json | undefined, body: Json | string): void {
    if (tickets === undefined || tickets === null) return;
    if (!Array.isArray(tickets) || tickets.length !== groups.length
        || !tickets.every((t) => typeof t === "string" && t.length <= 256)) {
      throw new ServiceError(200, "bad_assignment", `the server's tickets are not ${groups.length} `
                             + `strings: ${cut(stringify(tickets), 200)}`, body);
    }
    groups.forEach((g, j) => {
      const pool = this.tickets.get(g as number) ?? [];
      pool.push(tickets[j] as string);
      this.tickets.set(g as number, pool);
    });
  }

  /** The group the service assigns to this user; its ticket is kept for the send. */
  async assignment(): Promise<number> {
    const [, body] = await this.request("GET", this.path("/assignment"));
    const g = isObject(body) ? body["group"] : undefined;
    if (typeof g !== "number" || !Number.isInteger(g)) {
      throw new ServiceError(200, "bad_assignment", "the server's assignment is not an integer "
                             + `group: ${cut(typeof body === "string" ? body : stringify(body), 200)}`, body);
    }
    const t = (body as Record<string, Json>)["ticket"];
    this.keep([g], t === undefined || t === null ? t : [t], body);
    return g;
  }

  /** Groups for `count` users (one request); their tickets are kept for the sends. */
  async assignments(count: number): Promise<number[]> {
    const [, body] = await this.request("GET", this.path("/assignment", { count }));
    const groups = isObject(body) ? body["groups"] : undefined;
    if (!Array.isArray(groups) || groups.length !== count
        || !groups.every((g) => typeof g === "number" && Number.isInteger(g))) {
      throw new ServiceError(200, "bad_assignment", `the server's assignment is not ${count} groups: `
                             + cut(typeof body === "string" ? body : stringify(body), 200), body);
    }
    this.keep(groups, (body as Record<string, Json>)["tickets"], body);
    return groups as number[];
  }

  private takeTicket(group: unknown): string | undefined {
    let pool = typeof group === "number" ? this.tickets.get(group) : undefined;
    if (!pool || !pool.length) pool = [...this.tickets.values()].find((p) => p.length);
    return pool?.pop();
  }

  private ticketed(report: Report): Report {
    const out = { ...report };
    if (!("ticket" in out)) {
      const ticket = this.takeTicket(out.group);
      if (ticket !== undefined) out["ticket"] = ticket;
    }
    return out;
  }

  /** Copies of `reports`, each given a kept ticket if it has none (an outbox keeps a
   *  report with its ticket for a later retry). */
  withTickets(reports: Report[]): Report[] {
    return reports.map((r) => this.ticketed(r));
  }

  /** Post one report (with a kept ticket); the service's acknowledgement. */
  async send(report: Report): Promise<Json> {
    return (await this.request("POST", this.path("/reports"), this.ticketed(report)))[1] as Json;
  }

  /** Post reports (each with a kept ticket) in batches of at most 10,000, each stored
   *  atomically by the service. */
  async sendBatch(reports: Report[]): Promise<{ accepted: number; already_stored: number }> {
    let accepted = 0;
    let stored = 0;
    for (let start = 0; start < reports.length; start += MAX_BATCH_REPORTS) {
      const chunk = reports.slice(start, start + MAX_BATCH_REPORTS).map((r) => this.ticketed(r));
      const [, body] = await this.request("POST", this.path("/reports/batch"), { reports: chunk });
      if (isObject(body)) {
        accepted += Number(body["accepted"] ?? 0);
        stored += Number(body["already_stored"] ?? 0);
      }
    }
    return { accepted, already_stored: stored };
  }

  private async deliver(report: Report): Promise<Json> {
    try {
      return await this.send(report);
    } catch (exc) {
      if (exc instanceof ServiceError && exc.status === 409 && exc.code === "duplicate_report") {
        return { accepted: 0, already_stored: 1 };
      }
      throw exc;
    }
  }

  /** The whole path for one device: the plan, the device's checks, a ticket, the report
   *  (made, charged and stored by `device`), the send; returns the report.  The device
   *  refuses (one line, nothing drawn, no assignment asked) a plan it will not report
   *  under or a report its caps cannot pay for; a campaign it already reported sends the
   *  stored report again with the ticket the ledger kept for it (a duplicate answer
   *  counts as delivered).  `assign: "local"`
   *  draws the group on the device instead of taking the server's. */
  async submit(record: unknown, device: Device, { assign = "server" }: { assign?: "server" | "local" } = {}
  ): Promise<Report> {
    if (assign !== "server" && assign !== "local") {
      throw new DPMarginalsError(`assign must be 'server' or 'local', got ${pyr(assign)}`);
    }
    const where = { origin: this.origin, campaign: this.campaign };
    const plan = await device.accept(await this.plan(), where);
    const stored = device.storedReport(where);
    if (stored !== null) { // sent again with the ticket it was first sent with
      await this.deliver(stored);
      const { ticket: _, ...report } = stored;
      return report as Report;
    }
    const kept = device.ledger.groupOf(plan.hash);
    await device.checkCharge(plan, kept, where.origin); // before asking for an assignment
    const assigned = await this.assignment(); // its ticket goes with the report
    const group = assign === "server" && kept === null ? assigned : null;
    const report = await device.report(plan, record, { ...where, group });
    const sendable = this.ticketed(report);
    if (typeof sendable["ticket"] === "string") { // kept before it leaves: a resend carries it
      const ticket = sendable["ticket"];
      await device.ledger.locked(() => device.ledger.keepTicket(`${where.origin}|${where.campaign}`, ticket));
    }
    await this.deliver(sendable);
    return report;
  }

  /** The campaign's status (with the token, if this client has one). */
  async status(): Promise<Json> {
    return (await this.request("GET", this.path("/status"), undefined, { admin: !!this.token }))[1] as Json;
  }

  /** A marginal of the campaign's current release (token as for status). */
  async marginal(attributes: string[]): Promise<Json> {
    const path = this.path("/marginals", { attributes: attributes.join(",") });
    return (await this.request("GET", path, undefined, { admin: !!this.token }))[1] as Json;
  }

  /** A client of the phase after this adaptive campaign's ({phase 1's id}.phase{j}). */
  async nextPhase(): Promise<ServiceClient> {
    const plan = await this.plan();
    const phase = plan.method === "adaptive" && typeof plan.params["phase"] === "number"
      ? plan.params["phase"] : 0;
    const phases = Number(plan.params["phases"] ?? 2);
    if (!(phase >= 1 && phase < phases)) {
      throw new DPMarginalsError(`campaign ${pyr(this.campaign)} is not a phase of an adaptive `
                                 + `collection with a phase after it (its plan's method is `
                                 + `${pyr(plan.method)}, phase ${pyr(plan.params["phase"] ?? null)} of `
                                 + `${pyr(plan.params["phases"] ?? null)})`);
    }
    const first = phase > 1 ? String(plan.params["phase1_campaign"] ?? this.campaign) : this.campaign;
    return new ServiceClient(this.server, `${first}.phase${phase + 1}`,
                             { token: this.token, timeout: this.timeout, retries: this.retries,
                               fetch: this.fetcher });
  }
}
