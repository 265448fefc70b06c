// The browser side of tests/test_typescript_client.py: every person is a Device (its own
// ledger) reporting through the service's real API, with the assignment's ticket.
import {
  BudgetExceeded, Device, IndexedDBStore, LocalStorageStore, PlanRefused, ServiceClient, stringify,
} from "../bundle/dpmarginals.min.mjs";

const CAPS = { maxEpsilon: 2, maxTotalEpsilon: 20 };

/** `records` people of one campaign: the first `single` through submit (a GET assignment
 *  and a POST each; person 0's ledger in localStorage, person 1's in IndexedDB, each
 *  submitting twice: the second time is the stored report, a duplicate the service
 *  counts as delivered), the others a batch of 500 at a time (one assignment request,
 *  one POST).  Returns the reports sent, as JSON text (OLH seeds are beyond 2^53). */
window.runPeople = async ({ server, campaign, records, single }) => {
  const client = new ServiceClient(server, campaign);
  const plan = await client.plan();
  const reports = [];
  for (let i = 0; i < single; i++) {
    const store = i === 0 ? new LocalStorageStore(`dpm-e2e-${campaign}`)
      : i === 1 ? new IndexedDBStore("dpm-e2e", campaign) : null;
    const report = await client.submit(records[i], await Device.open(store, CAPS));
    if (store !== null) {
      const again = await client.submit(records[i], await Device.open(store, CAPS));
      if (stringify(again) !== stringify(report)) throw new Error("a second submit made a new report");
    }
    reports.push(report);
  }
  for (let start = single; start < records.length; start += 500) {
    const part = records.slice(start, start + 500);
    const groups = await client.assignments(part.length);
    const batch = [];
    for (let j = 0; j < part.length; j++) {
      const device = await Device.open(null, CAPS);
      batch.push(await device.report(plan, part[j], { origin: client.origin, campaign, group: groups[j] }));
    }
    const sent = await client.sendBatch(batch);
    if (sent.accepted !== batch.length) throw new Error(`accepted ${sent.accepted} of ${batch.length}`);
    reports.push(...batch);
  }
  return stringify(reports);
};

/** What a device refuses in the browser, before any draw: (class, message) pairs. */
window.runRefusals = async ({ server, campaign, record }) => {
  const client = new ServiceClient(server, campaign);
  const out = [];
  const attempt = async (caps, rec) => {
    const told = [];
    try {
      const report = await client.submit(rec, await Device.open(null, { ...caps, onWarning: (m) => told.push(m) }));
      out.push(["reported", told.join("; "), report]);
    } catch (exc) {
      out.push([exc instanceof PlanRefused ? "PlanRefused" : exc instanceof BudgetExceeded
        ? "BudgetExceeded" : exc.name, exc.message]);
    }
  };
  await attempt({ maxEpsilon: 1, maxTotalEpsilon: 20 }, record); // a plan above the cap
  await attempt({ maxEpsilon: 2, maxTotalEpsilon: 1 }, record); // the total cap
  // a record outside the domain (every attribute: whichever group the device gets) is
  // reported as a random value, the app told: a refusal would tell the server
  await attempt(CAPS, { sex: "unknown", age: -5, region: "mars", smoker: "maybe" });
  return out;
};

/** People reporting from a module web worker (its own IndexedDB ledgers). */
window.runWorker = ({ server, campaign, records }) => new Promise((resolve, reject) => {
  const worker = new Worker(new URL("worker.mjs", import.meta.url), { type: "module" });
  worker.onmessage = (event) => (event.data.error ? reject(new Error(event.data.error)) : resolve(event.data.reports));
  worker.onerror = (event) => reject(new Error(event.message));
  worker.postMessage({ server, campaign, records });
});

document.getElementById("state").textContent = "ready";
