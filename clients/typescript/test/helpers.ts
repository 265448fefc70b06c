// Test-only helpers: a replayed word stream (never reachable from the package's entry
// points), the shared vectors file, exact-rational helpers.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { DPMarginalsError } from "../src/errors.js";
import { type Json, parseJson } from "../src/json.js";
import type { WordSource } from "../src/samplers.js";

/** A source that replays given 32-bit words; it raises when a sampler asks for more. */
export class WordStream implements WordSource {
  used = 0;
  constructor(readonly stream: number[]) {
    if (!stream.every((w) => Number.isInteger(w) && w >= 0 && w < 2 ** 32)) {
      throw new DPMarginalsError("a word stream holds integers in [0, 2^32)");
    }
  }
  word(): number {
    if (this.used >= this.stream.length) {
      throw new DPMarginalsError(`the word stream ran out after ${this.used} words`);
    }
    return this.stream[this.used++]!;
  }
}

export const VECTORS_PATH = process.env["DPMARGINALS_VECTORS"]
  ?? fileURLToPath(new URL("../../../../tests/vectors/device.json", import.meta.url));

let cached: { text: string; json: Record<string, Json> } | null = null;

/** The shared vectors, parsed as Python parses them (exact integers, float marks). */
export function vectors(): { text: string; json: Record<string, Json> } {
  if (!cached) {
    const text = readFileSync(VECTORS_PATH, "utf8");
    cached = { text, json: parseJson(text) as Record<string, Json> };
  }
  return cached;
}

/** A value with BigInts as decimal strings, for deep comparisons. */
export function plain(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value, (_, v) => (typeof v === "bigint" ? `${v}n` : v)),
    (_, v) => (typeof v === "string" && /^-?\d+n$/.test(v) ? v : v));
}

/** A JSON value with integers normalized (BigInt or number -> decimal string). */
export function norm(value: unknown): unknown {
  if (typeof value === "bigint" || (typeof value === "number" && Number.isInteger(value))) {
    return `int:${BigInt(value)}`;
  }
  if (Array.isArray(value)) return value.map(norm);
  return value;
}
