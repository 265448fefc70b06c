// JSON as the Python reference reads and writes it, exactly.
//
// * parseJson: JSON text -> JS values, where an integer literal beyond 2^53 - 1 is a
//   BigInt (exact, as Python's int) and a number written with a fraction or an exponent
//   ("3.0", "1e300") is remembered as a float (floatAt), as Python's json does; the
//   text order of an object's keys is kept where JS would reorder them (keysOf).
// * canonical: RFC 8785 (JSON Canonicalization Scheme), the form a plan is hashed in.
// * stringify: compact JSON for reports and the ledger (BigInt written exactly).
// * pythonDumps: Python's json.dumps(sort_keys=True, separators=(",", ":")), the hash of
//   version 1 plans.
import { DPMarginalsError } from "./errors.js";
import { PyFloat, pyRepr } from "./pyformat.js";

export { PyFloat };

export type Json = null | boolean | number | bigint | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

const floats = new WeakMap<object, Set<string>>(); // integral numbers written as floats
const order = new WeakMap<object, string[]>(); // key order, where JS's would differ

/** Whether container[key] was written as a float ("3.0"): Python reads it as a float. */
export function floatAt(container: object, key: string | number): boolean {
  return floats.get(container)?.has(String(key)) ?? false;
}

/** An object's keys in the order of its JSON text (JS puts integer-like keys first). */
export function keysOf(obj: object): string[] {
  return order.get(obj) ?? Object.keys(obj);
}

export function isObject(v: unknown): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** A JSON integer as Python reads it: an int, not a bool, not written as a float. */
export function isInt(container: object, key: string | number): boolean {
  const v = (container as Record<string, unknown>)[key as string];
  return (typeof v === "bigint" || (typeof v === "number" && Number.isInteger(v)))
    && !floatAt(container, key);
}

const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/y;

/** Parse JSON text (strict: no NaN, no trailing commas, no control characters). */
export function parseJson(text: string): Json {
  let i = 0;
  const fail = (what: string): never => {
    throw new DPMarginalsError(`not valid JSON: ${what} at character ${i}`);
  };
  const ws = () => {
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c !== 32 && c !== 9 && c !== 10 && c !== 13) break;
      i++;
    }
  };
  const mark = (container: object, key: string) => {
    let set = floats.get(container);
    if (!set) floats.set(container, (set = new Set()));
    set.add(key);
  };
  const value = (depth: number): [Json, boolean] => {
    if (depth > 512) fail("nesting too deep");
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      const obj: JsonObject = {};
      const keys: string[] = [];
      ws();
      if (text[i] === "}") { i++; return [obj, false]; }
      for (;;) {
        ws();
        if (text[i] !== '"') fail("expected a string key");
        const key = string();
        ws();
        if (text[i++] !== ":") fail("expected ':'");
        const [v, isFloat] = value(depth + 1);
        if (!Object.prototype.hasOwnProperty.call(obj, key)) keys.push(key);
        Object.defineProperty(obj, key, { value: v, writable: true, enumerable: true,
                                          configurable: true });
        if (isFloat) mark(obj, key);
        else floats.get(obj)?.delete(key);
        ws();
        const sep = text[i++];
        if (sep === "}") break;
        if (sep !== ",") fail("expected ',' or '}'");
      }
      if (Object.keys(obj).some((k, j) => k !== keys[j])) order.set(obj, keys);
      return [obj, false];
    }
    if (c === "[") {
      i++;
      const arr: Json[] = [];
      ws();
      if (text[i] === "]") { i++; return [arr, false]; }
      for (;;) {
        const [v, isFloat] = value(depth + 1);
        if (isFloat) mark(arr, String(arr.length));
        arr.push(v);
        ws();
        const sep = text[i++];
        if (sep === "]") break;
        if (sep !== ",") fail("expected ',' or ']'");
      }
      return [arr, false];
    }
    if (c === '"') return [string(), false];
    if (text.startsWith("true", i)) { i += 4; return [true, false]; }
    if (text.startsWith("false", i)) { i += 5; return [false, false]; }
    if (text.startsWith("null", i)) { i += 4; return [null, false]; }
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (!m) fail("unexpected character");
    i += m![0].length;
    if (m![1] === undefined && m![2] === undefined) { // an integer literal, exact
      const n = Number(m![0]);
      return [Number.isSafeInteger(n) ? (n === 0 ? 0 : n) : BigInt(m![0]), false];
    }
    const x = Number(m![0]);
    return [x, Number.isInteger(x)];
  };
  const string = (): string => {
    i++; // the opening quote
    let out = "";
    let start = i;
    for (;;) {
      if (i >= text.length) fail("unterminated string");
      const c = text.charCodeAt(i);
      if (c === 34) { out += text.slice(start, i); i++; return out; }
      if (c < 32) fail("control character in a string");
      if (c === 92) {
        out += text.slice(start, i);
        const e = text[i + 1];
        const simple: Record<string, string> = { '"': '"', "\\": "\\", "/": "/", b: "\b",
                                                 f: "\f", n: "\n", r: "\r", t: "\t" };
        if (e !== undefined && e in simple) { out += simple[e]; i += 2; }
        else if (e === "u" && /^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) {
          out += String.fromCharCode(parseInt(text.slice(i + 2, i + 6), 16));
          i += 6;
        } else fail("bad escape");
        start = i;
      } else i++;
    }
  };
  const [result] = value(0);
  ws();
  if (i !== text.length) fail("trailing characters");
  return result;
}

function notPortable(what: string): never {
  throw new DPMarginalsError(`the plan holds a value that is not portable JSON: ${what}`);
}

function checkString(s: string): string {
  // A lone surrogate has no UTF-8 form: no language hashes it alike.
  if (/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s)) {
    notPortable(`a string holds a lone surrogate: ${JSON.stringify(s).slice(0, 40)}`);
  }
  return JSON.stringify(s); // JSON's minimal escapes: RFC 8785's string form
}

/** RFC 8785 canonical JSON: keys sorted by UTF-16 code units, ECMAScript numbers. */
export function canonical(value: unknown): string {
  if (value instanceof PyFloat) return canonical(value.value);
  if (value === null) return "null";
  if (value === true) return "true";
  if (value === false) return "false";
  if (typeof value === "number") {
    if (!Number.isFinite(value)) notPortable(String(value));
    return String(value); // ECMAScript Number::toString; -0 is "0"
  }
  if (typeof value === "bigint") {
    const big = value < 0n ? -value : value;
    if (big > 9007199254740991n) notPortable(`the integer ${value} is beyond 2^53 - 1`);
    return value.toString();
  }
  if (typeof value === "string") return checkString(value);
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (typeof value === "object") {
    const obj = value as Record<string, unknown>;
    const keys = Object.keys(obj).filter((k) => obj[k] !== undefined).sort();
    return `{${keys.map((k) => `${checkString(k)}:${canonical(obj[k])}`).join(",")}}`;
  }
  return notPortable(typeof value);
}

/** Compact JSON of reports and ledgers: BigInt exactly, no NaN or Infinity. */
export function stringify(value: unknown, sortKeys = false): string {
  if (value instanceof PyFloat) return stringify(value.value, sortKeys);
  if (value === null || value === true || value === false) return String(value);
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new DPMarginalsError(`${value} is not JSON`);
    return String(value);
  }
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "string") return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map((v) => stringify(v, sortKeys)).join(",")}]`;
  if (typeof value === "object") {
    const obj = value as Record<string, unknown>;
    const keys = Object.keys(obj).filter((k) => obj[k] !== undefined);
    if (sortKeys) keys.sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${stringify(obj[k], sortKeys)}`)
      .join(",")}}`;
  }
  throw new DPMarginalsError(`${typeof value} is not JSON`);
}

function codePointCompare(a: string, b: string): number {
  const x = Array.from(a);
  const y = Array.from(b);
  for (let j = 0; j < Math.min(x.length, y.length); j++) {
    const d = x[j]!.codePointAt(0)! - y[j]!.codePointAt(0)!;
    if (d) return d;
  }
  return x.length - y.length;
}

function asciiString(s: string): string {
  let out = '"';
  for (let j = 0; j < s.length; j++) {
    const c = s.charCodeAt(j);
    const ch = s[j]!;
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (ch === "\b") out += "\\b";
    else if (ch === "\f") out += "\\f";
    else if (c < 0x20 || c > 0x7e) out += "\\u" + c.toString(16).padStart(4, "0");
    else out += ch;
  }
  return out + '"';
}

/** Python's json.dumps(value, sort_keys=True, separators=(",", ":")): floats as
 *  float.__repr__ ("1.0", "1e-07"), non-ASCII as \\uXXXX, keys by code point.  A number
 *  is a float where it is a PyFloat or the parser marked it (floatAt). */
export function pythonDumps(value: unknown, isFloat = false): string {
  if (value === null) return "null";
  if (value === true) return "true";
  if (value === false) return "false";
  if (value instanceof PyFloat) return pythonDumps(value.value, true);
  if (typeof value === "number") {
    if (!Number.isFinite(value)) notPortable(String(value));
    if (isFloat || !Number.isInteger(value)) return pyRepr(value);
    return String(value === 0 ? 0 : BigInt(value));
  }
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "string") return asciiString(value);
  if (Array.isArray(value)) {
    return `[${value.map((v, j) => pythonDumps(v, floatAt(value, j))).join(",")}]`;
  }
  if (typeof value === "object") {
    const obj = value as Record<string, unknown>;
    const keys = Object.keys(obj).filter((k) => obj[k] !== undefined).sort(codePointCompare);
    return `{${keys.map((k) => `${asciiString(k)}:${pythonDumps(obj[k], floatAt(obj, k))}`)
      .join(",")}}`;
  }
  return notPortable(typeof value);
}
