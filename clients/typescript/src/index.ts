// @dpmarginals/client: the dpmarginals device for browsers, web workers and Node >= 18.
// The same reports as the Python reference, bit for bit (docs/device-spec.md), from
// crypto.getRandomValues only; plans checked before any draw; a ledger that enforces the
// device's own caps whatever the server sends.
export { checkPlan, deviceCap, longitudinalFloor, parsePlan, EPSILON_CEILING } from "./checks.js";
export { Device, DAY, MIN_LONGITUDINAL_RATIO, family, familyResponses, type DeviceCaps, type Report } from "./device.js";
export {
  BudgetExceeded, DPMarginalsError, LedgerError, PlanRefused, RecordValueError, ServiceError,
} from "./errors.js";
export type { Payload } from "./formats.js";
export { MAX_BATCH_REPORTS, ServiceClient, originOf, type ServiceOptions } from "./http.js";
export { canonical, parseJson, stringify } from "./json.js";
export {
  IndexedDBStore, LEDGER_FORMAT, LEDGER_VERSION, Ledger, LocalStorageStore, MemoryStore,
  campaignRoot, type LedgerStore,
} from "./ledger.js";
export { Plan, planHash, type GroupSpec } from "./plan.js";
