// The service client on fetch, against a server in memory: the plan, assignments and
// their tickets, single reports and batches, retries (a lost connection, 429/502-504 and
// Retry-After), a duplicate answer on a retry counted as delivered, and submit's order
// (refuse before asking for an assignment or drawing).
import assert from "node:assert/strict";
import { test } from "node:test";
import { Device } from "../src/device.js";
import { BudgetExceeded, PlanRefused, ServiceError } from "../src/errors.js";
import { ServiceClient, originOf } from "../src/http.js";
import { type JsonObject, parseJson, stringify } from "../src/json.js";
import { drawn } from "../src/random.js";
import { RECORD, planWith } from "./plans.js";

interface Answer { status?: number; body?: unknown; headers?: Record<string, string>; fail?: boolean }

class FakeServer {
  asked: string[] = [];
  posted: unknown[] = [];
  script: Answer[] = []; // answers given before the normal ones
  constructor(public plan: unknown, public tickets = true) {}

  fetch: typeof fetch = async (input, init) => {
    const url = new URL(String(input));
    const method = init?.method ?? "GET";
    const last = url.pathname.split("/").pop()!;
    this.asked.push(`${method} ${last}`);
    const scripted = this.script.shift();
    if (scripted?.fail) throw new TypeError("fetch failed");
    const reply = (status: number, body: unknown, headers: Record<string, string> = {}) =>
      new Response(typeof body === "string" ? body : stringify(body), { status, headers });
    if (scripted) return reply(scripted.status ?? 200, scripted.body ?? {}, scripted.headers);
    if (last === "plan") return reply(200, this.plan);
    if (last === "assignment") {
      const count = url.searchParams.get("count");
      if (count === null) return reply(200, this.tickets ? { group: 1, ticket: "t0" } : { group: 1 });
      const n = Number(count);
      return reply(200, { groups: Array.from({ length: n }, (_, i) => i % 3),
                          tickets: Array.from({ length: n }, (_, i) => `t${i}`) });
    }
    this.posted.push(parseJson(String(init?.body)));
    const batch = (parseJson(String(init?.body)) as JsonObject)["reports"];
    return reply(201, { accepted: Array.isArray(batch) ? batch.length : 1 });
  };
}

test("origin: scheme://host[:port], lower case, the default port dropped", () => {
  assert.equal(originOf("HTTPS://Stats.Example.org:443/api/"), "https://stats.example.org");
  assert.equal(originOf("http://127.0.0.1:8000"), "http://127.0.0.1:8000");
  assert.equal(originOf("http://[::1]:80/x"), "http://[::1]");
  assert.throws(() => originOf("ftp://x"), /server must be an http\(s\) URL/);
});

test("submit refuses before asking for an assignment or drawing", async () => {
  const server = new FakeServer(await planWith());
  const client = new ServiceClient("https://stats.example.org", "c", { fetch: server.fetch });
  const before = drawn();
  const low = await Device.open(null, { maxEpsilon: 0.5, maxTotalEpsilon: 10 });
  await assert.rejects(client.submit(RECORD, low), (e: Error) => e instanceof PlanRefused
    && /exceeds this device's max_epsilon/.test(e.message));
  assert.deepEqual(server.asked, ["GET plan"]);
  const broke = await Device.open(null, { maxEpsilon: 1, maxTotalEpsilon: 0.5 });
  await assert.rejects(client.submit(RECORD, broke), (e: Error) => e instanceof BudgetExceeded
    && /max_total_epsilon = 0.5/.test(e.message));
  assert.ok(!server.asked.includes("GET assignment"));
  assert.equal(drawn(), before);
});

test("submit reports once per campaign, with the assignment's ticket, and pins it", async () => {
  const server = new FakeServer(await planWith());
  const phone = await Device.open(null, { maxEpsilon: 1, maxTotalEpsilon: 10 });
  const client = new ServiceClient("https://Stats.Example.org:443/", "c", { fetch: server.fetch });
  const first = await client.submit(RECORD, phone);
  const second = await client.submit(RECORD, phone);
  assert.deepEqual(first, second);
  assert.equal(first.group, 1);
  assert.equal(Number(phone.ledger.total().n), 1);
  assert.deepEqual(Object.keys(phone.ledger.campaigns()), ["https://stats.example.org|c"]);
  assert.equal((server.posted[0] as JsonObject)["ticket"], "t0");
  // the resend carries the ticket the ledger kept: a ticketed service answers "already
  // stored" (a duplicate, delivered) only to a report with its ticket
  assert.equal((server.posted[1] as JsonObject)["ticket"], "t0");
  assert.equal(phone.ledger.campaign("https://stats.example.org|c")!.ticket, "t0");
  const fresh = new ServiceClient("https://stats.example.org", "c", { fetch: server.fetch });
  assert.deepEqual(await fresh.submit(RECORD, phone), first); // a new client, no ticket in hand
  assert.equal((server.posted[2] as JsonObject)["ticket"], "t0");
  assert.deepEqual(server.asked, ["GET plan", "GET assignment", "POST reports", "POST reports",
                                  "GET plan", "POST reports"]);
});

test("retries: a lost connection, 503 after Retry-After, then the answer", async () => {
  const server = new FakeServer(await planWith());
  server.script = [{ fail: true }, { status: 503, body: "busy", headers: { "Retry-After": "0" } }];
  const client = new ServiceClient("http://127.0.0.1:1", "c", { fetch: server.fetch });
  const plan = await client.plan();
  assert.equal(plan.m, 3);
  assert.deepEqual(server.asked, ["GET plan", "GET plan", "GET plan"]);
});

test("a Retry-After beyond a minute is not waited for; retries run out", async () => {
  const server = new FakeServer(await planWith());
  server.script = [{ status: 429, body: { error: "rate_limited", reason: "slow down" },
                     headers: { "Retry-After": "3600" } }];
  const client = new ServiceClient("http://127.0.0.1:1", "c", { fetch: server.fetch });
  await assert.rejects(client.plan(), (e: Error) => e instanceof ServiceError && e.status === 429
    && e.code === "rate_limited");
  server.script = [{ fail: true }, { fail: true }];
  const once = new ServiceClient("http://127.0.0.1:1", "c", { fetch: server.fetch, retries: 1 });
  await assert.rejects(once.plan(), /cannot reach http:\/\/127\.0\.0\.1:1: fetch failed/);
});

test("a duplicate answer on a retry counts as delivered", async () => {
  const server = new FakeServer(await planWith());
  const phone = await Device.open(null, { maxEpsilon: 1, maxTotalEpsilon: 10 });
  const client = new ServiceClient("http://127.0.0.1:1", "c", { fetch: server.fetch });
  const plan = await client.plan();
  const reports = [];
  for (let i = 0; i < 3; i++) {
    reports.push(await phone.report(plan, RECORD, { origin: client.origin, campaign: `c${i}`, group: i }));
  }
  server.script = [{ fail: true }, { status: 409, body: { error: "duplicate_report", reason: "seen",
                                                            duplicates: [0, 1, 2] } }];
  assert.deepEqual(await client.sendBatch(reports), { accepted: 0, already_stored: 3 });
  server.script = [{ status: 409, body: { error: "duplicate_report", reason: "seen", duplicates: [0, 1, 2] } }];
  await assert.rejects(client.sendBatch(reports), (e: Error) => e instanceof ServiceError && e.status === 409);
});

test("assignments: tickets kept per group and attached to the group's reports", async () => {
  const server = new FakeServer(await planWith());
  const client = new ServiceClient("http://127.0.0.1:1/api/", "c", { fetch: server.fetch });
  const groups = await client.assignments(5);
  assert.deepEqual(groups, [0, 1, 2, 0, 1]);
  const plan = await client.plan();
  const reports = [];
  for (const g of groups) { // five people, five devices
    const phone = await Device.open(null, { maxEpsilon: 1, maxTotalEpsilon: 10 });
    reports.push(await phone.report(plan, RECORD, { origin: client.origin, campaign: "c", group: g }));
  }
  const sent = await client.sendBatch(reports);
  assert.equal(sent.accepted, 5);
  const batch = (server.posted[0] as JsonObject)["reports"] as JsonObject[];
  const ticketOf: Record<string, number> = { t0: 0, t1: 1, t2: 2, t3: 0, t4: 1 };
  for (const r of batch) assert.equal(ticketOf[r["ticket"] as string], r["group"]);
  assert.equal(new Set(batch.map((r) => r["ticket"])).size, 5);
});

test("a malformed plan or assignment from the server is refused", async () => {
  const server = new FakeServer([1, 2, 3]);
  const client = new ServiceClient("http://127.0.0.1:1", "c", { fetch: server.fetch });
  await assert.rejects(client.plan(), /the server's plan is not a JSON object/);
  server.script = [{ body: { group: "1" } }, { body: { groups: [1], tickets: ["x", "y"] } }];
  await assert.rejects(client.assignment(), /not an integer group/);
  await assert.rejects(client.assignments(1), /the server's tickets are not 1 strings/);
});
