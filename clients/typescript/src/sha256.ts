// SHA-256 of a plan's canonical JSON: WebCrypto's subtle.digest, or the audited
// @noble/hashes where WebCrypto is absent (a page that is not a secure context; Node 18
// without its global crypto uses node:crypto's WebCrypto through the ./node entry).  The
// fallback is imported only when needed: the browser bundle keeps it in a file of its own.
import { fallbackSubtle } from "./random.js";

function hex(bytes: Uint8Array): string {
  let out = "";
  for (const b of bytes) out += b.toString(16).padStart(2, "0");
  return out;
}

/** SHA-256 of the text's UTF-8 bytes, as 64 lowercase hex digits. */
export async function sha256Hex(text: string): Promise<string> {
  const bytes = new TextEncoder().encode(text);
  const subtle = (globalThis as { crypto?: Crypto }).crypto?.subtle ?? fallbackSubtle();
  if (subtle && typeof subtle.digest === "function") {
    return hex(new Uint8Array(await subtle.digest("SHA-256", bytes)));
  }
  const { sha256 } = await import("@noble/hashes/sha256");
  return hex(sha256(bytes));
}
