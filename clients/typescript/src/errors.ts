// The errors a user (or a hostile server) can cause: one line naming the field and value.

/** Bad input: the message names the field and the offending value. */
export class DPMarginalsError extends Error {
  constructor(message: string) {
    super(message);
  }
}

/** The device refuses a plan (no random draw was made). */
export class PlanRefused extends DPMarginalsError {}

/** A report would take the device past one of its caps (no random draw was made). */
export class BudgetExceeded extends DPMarginalsError {}

/** A value of a record the plan's domain cannot encode: the device reports a uniformly
 *  random value instead (a refusal would tell the server the value is outside its domain). */
export class RecordValueError extends DPMarginalsError {}

/** The ledger cannot be read, parsed or written (the message names it). */
export class LedgerError extends DPMarginalsError {}

/** The service refused a request: its HTTP status, error code and reason. */
export class ServiceError extends DPMarginalsError {
  constructor(readonly status: number, readonly code: string, readonly reason: string,
              readonly body: unknown = null) {
    super(`HTTP ${status} ${code}: ${reason}`);
  }
}

// Names survive minification (a bundle renames classes): set them on the prototypes.
for (const [cls, name] of [[DPMarginalsError, "DPMarginalsError"], [PlanRefused, "PlanRefused"],
                           [BudgetExceeded, "BudgetExceeded"], [LedgerError, "LedgerError"],
                           [RecordValueError, "RecordValueError"],
                           [ServiceError, "ServiceError"]] as const) {
  Object.defineProperty(cls.prototype, "name", { value: name, writable: true,
                                                 configurable: true });
}

export function refused(message: string): PlanRefused {
  return new PlanRefused(`plan refused: ${message}`);
}
