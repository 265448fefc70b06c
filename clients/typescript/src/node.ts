// @dpmarginals/client/node: Node's parts.  FileStore keeps the ledger in a file written
// atomically (a temporary file in the same folder, fsync, rename, the folder fsynced), one
// process at a time (a lock folder beside it); on Node 18, whose global crypto needs a
// flag, node:crypto's WebCrypto supplies crypto.getRandomValues.
import { randomBytes, webcrypto } from "node:crypto";
import { promises as fs } from "node:fs";
import { basename, dirname, join } from "node:path";
import { LedgerError } from "./errors.js";
import type { LedgerStore } from "./ledger.js";
import { pyr } from "./pyformat.js";
import { setNodeCrypto } from "./random.js";

setNodeCrypto(webcrypto as unknown as Parameters<typeof setNodeCrypto>[0]);

export * from "./index.js";

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (exc) {
    return (exc as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** The ledger in a file (the same JSON document as the Python client's). */
export class FileStore implements LedgerStore {
  readonly name: string;
  constructor(readonly path: string, readonly lockTimeout = 30) {
    this.name = `ledger ${pyr(path)}`;
  }

  async read(): Promise<string | null> {
    try {
      return await fs.readFile(this.path, "utf8");
    } catch (exc) {
      if ((exc as NodeJS.ErrnoException).code === "ENOENT") return null; // a new device
      throw new LedgerError(`cannot read ${this.name}: ${(exc as Error).message}`);
    }
  }

  async write(text: string): Promise<void> {
    const folder = dirname(this.path);
    const tmp = join(folder, `.${basename(this.path)}.${randomBytes(6).toString("hex")}.tmp`);
    try {
      const handle = await fs.open(tmp, "wx", 0o600);
      try {
        await handle.writeFile(text, "utf8");
        await handle.sync();
      } finally {
        await handle.close();
      }
      await fs.rename(tmp, this.path);
    } catch (exc) {
      await fs.unlink(tmp).catch(() => undefined);
      throw new LedgerError(`cannot write ${this.name}: ${(exc as Error).message}`);
    }
    try { // make the rename durable (POSIX)
      const dir = await fs.open(folder, "r");
      try { await dir.sync(); } finally { await dir.close(); }
    } catch { /* a platform that cannot fsync a folder */ }
  }

  /** Exclusive across processes: a lock folder beside the file, made whole (with its
   *  owner's pid and a random token) and renamed into place, which is atomic; one left by
   *  a process that is gone is moved aside and removed (a live holder's never is, however
   *  long it holds it: a stopped process keeps its lock, and the waiter times out).  A
   *  folder moved aside that turns out to be another live holder's (two waiters breaking
   *  one stale lock) is put back, and a holder releases only its own.  Stale temporary
   *  files of a writer killed mid-write are removed under the lock. */
  async lock<T>(body: () => Promise<T>): Promise<T> {
    const lock = `${this.path}.lockdir`;
    const deadline = Date.now() + this.lockTimeout * 1000;
    const me = `${process.pid} ${randomBytes(8).toString("hex")}`;
    const ownerOf = (dir: string) => fs.readFile(join(dir, "pid"), "utf8").catch(() => "");
    // a lock folder is stale when its owner's process is gone (one without a pid file:
    // when it is older than a minute); returns what its pid file held, and the verdict
    const staleLock = async (dir: string): Promise<[string, number, boolean]> => {
      const seen = await ownerOf(dir);
      const owner = Number(seen.split(" ")[0]) || 0;
      const age = Date.now() - ((await fs.stat(dir).catch(() => null))?.mtimeMs ?? Date.now());
      return [seen, owner, owner ? !alive(owner) : age > 60_000];
    };
    const made = async () => {
      const dir = await fs.mkdtemp(`${this.path}.lock-`);
      await fs.writeFile(join(dir, "pid"), me);
      return dir;
    };
    let mine = await made();
    try {
      for (;;) {
        try {
          await fs.rename(mine, lock);
          break;
        } catch (exc) {
          const code = (exc as NodeJS.ErrnoException).code;
          if (code === "ENOENT") { mine = await made(); continue; } // swept as a stale one
          if (code !== "EEXIST" && code !== "ENOTEMPTY" && code !== "EPERM") {
            throw new LedgerError(`cannot lock ${this.name}: ${(exc as Error).message}`);
          }
        }
        const [seen, owner, gone] = await staleLock(lock);
        if (gone) {
          const aside = `${lock}.stale-${randomBytes(6).toString("hex")}`;
          if (await fs.rename(lock, aside).then(() => true, () => false)) {
            if (await ownerOf(aside) === seen) {
              await fs.rm(aside, { recursive: true, force: true });
            } else { // another waiter broke it first and a live holder took the path
              await fs.rename(aside, lock).catch(() => undefined);
            }
          }
          continue;
        }
        if (Date.now() > deadline) {
          throw new LedgerError(`cannot lock ${this.name}: ${lock} is held by process ${owner || "?"}`);
        }
        await new Promise((r) => setTimeout(r, 5 + Math.floor(Math.random() * 20)));
      }
    } catch (exc) {
      await fs.rm(mine, { recursive: true, force: true });
      throw exc;
    }
    try {
      const folder = dirname(this.path);
      const name = basename(this.path);
      for (const entry of await fs.readdir(folder).catch(() => [] as string[])) {
        const stale = (entry.startsWith(`.${name}.`) && entry.endsWith(".tmp"))
          || entry.startsWith(`${name}.lockdir.stale-`);
        if (stale) await fs.rm(join(folder, entry), { recursive: true, force: true });
        else if (entry.startsWith(`${name}.lock-`)) { // a locker killed before its rename
          const where = join(folder, entry);
          if ((await staleLock(where))[2]) await fs.rm(where, { recursive: true, force: true });
        }
      }
      return await body();
    } finally { // moved aside whole first: the lock's path is never an empty folder
      if (await ownerOf(lock) === me) { // only our own
        const gone = `${lock}.stale-${randomBytes(6).toString("hex")}`;
        await fs.rename(lock, gone);
        await fs.rm(gone, { recursive: true, force: true });
      }
    }
  }
}
