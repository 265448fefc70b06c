// Python's forms of a float, exactly: repr(x) ("1.0", "1e-07", the shortest digits that
// read back, as ECMAScript's) and format(x, "g") (6 significant digits, rounded half to
// even on the float's exact decimal value).  A plan's default bin labels ("[0, 18)") and a
// numeric label's text are Python's; the device's messages use them too.

/** A number Python holds as a float (a bin edge, a budget): "1.0" in Python's JSON. */
export class PyFloat {
  constructor(readonly value: number) {}
}

function sign(x: number): string {
  return x < 0 || Object.is(x, -0) ? "-" : "";
}

function special(x: number): string | null {
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  return null;
}

function scientific(digits: string, exp: number): string {
  const mant = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  return `${mant}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
}

function fixed(digits: string, exp: number): [string, string] {
  if (exp < 0) return ["0", "0".repeat(-exp - 1) + digits];
  const whole = digits.slice(0, exp + 1).padEnd(exp + 1, "0");
  return [whole, digits.slice(exp + 1)];
}

/** Python's repr of a float. */
export function pyRepr(x: number): string {
  const s = special(x);
  if (s !== null) return s;
  if (x === 0) return `${sign(x)}0.0`;
  const [mant, e] = Math.abs(x).toExponential().split("e") as [string, string];
  const digits = mant.replace(".", "");
  const exp = Number(e);
  if (exp < -4 || exp >= 16) return sign(x) + scientific(digits, exp);
  const [whole, frac] = fixed(digits, exp);
  return `${sign(x)}${whole}.${frac || "0"}`;
}

/** The exact decimal digits of |x| (no leading zeros) and the exponent of the first. */
function exactDecimal(x: number): [string, number] {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, Math.abs(x));
  const hi = view.getUint32(0);
  const lo = view.getUint32(4);
  const biased = hi >>> 20;
  let mant = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
  let e: number;
  if (biased === 0) e = -1074;
  else { mant |= 1n << 52n; e = biased - 1075; }
  let n: bigint;
  let q: number;
  if (e >= 0) { n = mant << BigInt(e); q = 0; }
  else { n = mant * 5n ** BigInt(-e); q = e; }
  const digits = n.toString();
  return [digits, digits.length - 1 + q];
}

/** Python's format(x, "g"): 6 significant digits (exact half-to-even rounding). */
export function pyFormatG(x: number, precision = 6): string {
  const s = special(x);
  if (s !== null) return s;
  if (x === 0) return `${sign(x)}0`;
  let [digits, exp] = exactDecimal(x);
  if (digits.length > precision) {
    const keep = digits.slice(0, precision);
    const rest = digits.slice(precision);
    const half = rest[0] === "5" && /^50*$/.test(rest);
    const up = rest[0]! > "5" || (rest[0] === "5" && !half)
      || (half && Number(keep[keep.length - 1]) % 2 === 1);
    let rounded = up ? (BigInt(keep) + 1n).toString() : keep;
    if (rounded.length > precision) { rounded = rounded.slice(0, precision); exp += 1; }
    digits = rounded;
  }
  digits = digits.replace(/0+$/, "") || "0";
  if (exp < -4 || exp >= precision) return sign(x) + scientific(digits, exp);
  const [whole, frac] = fixed(digits, exp);
  return sign(x) + whole + (frac ? `.${frac}` : "");
}

/** Python's str() of a JSON value as a label: str(int), repr(float), the string itself. */
export function pyNumberText(x: number | bigint, isFloat: boolean): string {
  if (typeof x === "bigint") return x.toString();
  if (isFloat || !Number.isInteger(x)) return pyRepr(x);
  return Number.isSafeInteger(x) ? String(x) : BigInt(x).toString();
}

/** Python's repr of a JSON value, for messages ('text', 1.0, [1, 2], {'k': None}). */
export function pyr(value: unknown, isFloat = false): string {
  if (value === null || value === undefined) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (value instanceof PyFloat) return pyRepr(value.value);
  if (typeof value === "number") return pyNumberText(value, isFloat);
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "string") {
    const quote = value.includes("'") && !value.includes('"') ? '"' : "'";
    const body = value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/\r/g, "\\r")
      .replace(/\t/g, "\\t");
    return quote + (quote === "'" ? body.replace(/'/g, "\\'") : body) + quote;
  }
  if (Array.isArray(value)) return `[${value.map((v) => pyr(v)).join(", ")}]`;
  if (typeof value === "object") {
    const obj = value as Record<string, unknown>;
    return `{${Object.keys(obj).map((k) => `${pyr(k)}: ${pyr(obj[k])}`).join(", ")}}`;
  }
  return String(value);
}

/** The first `limit` characters of a text (Python's f"{x!r:.80}" and str(x)[:80]). */
export function cut(text: string, limit = 80): string {
  return text.length <= limit ? text : text.slice(0, limit);
}

/** Python's f"{n:,}": digits in groups of three. */
export function commas(n: number | bigint): string {
  return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}
