// A module web worker of the end-to-end page: people reporting with their ledgers in
// IndexedDB (a worker has no localStorage), through submit.
import { Device, IndexedDBStore, ServiceClient, stringify } from "../bundle/dpmarginals.min.mjs";

self.onmessage = async (event) => {
  const { server, campaign, records } = event.data;
  try {
    const client = new ServiceClient(server, campaign);
    const reports = [];
    for (let i = 0; i < records.length; i++) {
      const device = await Device.open(new IndexedDBStore("dpm-e2e-worker", `${campaign}-${i}`),
                                       { maxEpsilon: 2, maxTotalEpsilon: 20 });
      reports.push(await client.submit(records[i], device));
    }
    self.postMessage({ reports: stringify(reports) });
  } catch (exc) {
    self.postMessage({ error: `${exc.name}: ${exc.message}` });
  }
};
