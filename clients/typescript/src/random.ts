// The device's only randomness: crypto.getRandomValues (the platform's CSPRNG).  Without
// it the client refuses to run.  Words are drawn 1 KiB at a time and each is zeroed once
// used, so no past draw stays in memory.
import { DPMarginalsError } from "./errors.js";
import type { WordSource } from "./samplers.js";

interface RandomValues {
  getRandomValues<T extends ArrayBufferView | null>(array: T): T;
  subtle?: SubtleCrypto;
}

let nodeFallback: RandomValues | null = null;

/** (internal) node:crypto's SubtleCrypto, where the ./node entry registered it. */
export function fallbackSubtle(): SubtleCrypto | undefined {
  return nodeFallback?.subtle;
}

/** (internal) Node 18 without a global crypto: node:crypto's webcrypto (the ./node entry). */
export function setNodeCrypto(c: RandomValues): void {
  nodeFallback = c;
}

export function platformCrypto(): RandomValues {
  const c = (globalThis as { crypto?: RandomValues }).crypto;
  if (c && typeof c.getRandomValues === "function") return c;
  if (nodeFallback) return nodeFallback;
  throw new DPMarginalsError("this client refuses to run without crypto.getRandomValues (the "
                             + "platform's CSPRNG); on Node 18 import '@dpmarginals/client/node'");
}

const buffer = new Uint32Array(256);
let used = buffer.length;
let words = 0;

/** (internal, for the tests) How many random words and ids were ever drawn. */
export function drawn(): number {
  return words;
}

/** Words from crypto.getRandomValues. */
export class SecureWords implements WordSource {
  private readonly crypto = platformCrypto();

  word(): number {
    if (used === buffer.length) {
      this.crypto.getRandomValues(buffer);
      used = 0;
    }
    const w = buffer[used]!;
    buffer[used++] = 0;
    words++;
    return w;
  }
}

/** `bytes` random bytes as lowercase hex (report ids: 128 bits). */
export function randomHex(bytes: number): string {
  const raw = platformCrypto().getRandomValues(new Uint8Array(bytes));
  words++;
  let out = "";
  for (const b of raw) out += b.toString(16).padStart(2, "0");
  return out;
}
