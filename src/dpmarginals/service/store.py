"""The aggregator's durable store: campaigns, reports, and incremental count tensors.

One interface, two back ends: :class:`SQLiteStore` (the default; WAL mode) and
:class:`PostgresStore` (``postgresql://`` URLs; needs ``psycopg``).  :func:`open_store`
picks one from a path or URL.

Tables::

    campaigns(num, name UNIQUE, plan_hash, plan,        the plan as canonical JSON, the
              settings, closed)                         operator's settings, 1 once closed
    reports(campaign, rid, grp, payload)                PRIMARY KEY (campaign, rid)
    tallies(campaign, grp, users, support)              support: its counts, int64 little-endian
    tickets(campaign, block, bits)                      spent tickets: bit s % 8192 of
                                                        block s // 8192 for serial s
    meta(key, value)                                    schema version, the ticket secret,
                                                        the next ticket serial

* **Report-id uniqueness** is the primary key of ``reports``: a second report with the same
  id in a campaign violates it, and the whole batch it came in is rolled back.
* **Count tensors** (``tallies``) are updated in the same transaction as the inserts, so
  they always equal the support counts of the stored reports; :meth:`Store.recount`
  recomputes them from the reports (tests check both agree).
* **Durability**: ``add_reports`` returns only after the transaction has committed.  A
  single writer thread takes pending batches from a queue and commits them together
  (group commit): each batch under its own savepoint, so a duplicate in one batch rolls
  back only that batch; one commit (one fsync with ``synchronous=FULL``) acknowledges all.
* **No arrival order**: ``reports`` is keyed by the random report id (SQLite: a
  ``WITHOUT ROWID`` table), and nothing records when a report arrived.  Spent tickets are
  bits of a bitmap by ticket serial, in a table of their own: nothing links a ticket to
  its report.  A batch's tickets, handed out together, touch one or two bitmap rows (not
  one index entry each), spent in the transaction that stores the batch.
* **Snapshots**: :meth:`Store.snapshot` reads a campaign's reports and their count in one
  read transaction on its own connection, so an export never holds part of a batch.
* **Private files**: a SQLite store (and its WAL and shared-memory files, which SQLite
  creates with the database's permissions) is created readable by its owner only (0600).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import secrets
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import DPMarginalsError
from ..protocol.counts import Counts
from ..protocol.plan import Plan
from ..protocol.reports import DecodedReports, PlanCodec, ReportError
from .settings import CampaignSettings

__all__ = ["Campaign", "PostgresStore", "SQLiteStore", "Store", "StoreError", "TicketUsed",
           "open_store"]

SCHEMA_VERSION = 2
_INT64 = np.dtype("<i8")
_GROUP_COMMIT_REPORTS = 50_000  # at most this many reports per group commit
_GROUP_COMMIT_JOBS = 256
_EXPORT_PAGE = 5_000
_DUPLICATE_PROBE = 500
_STATE_TTL = 5.0  # seconds a campaign's open/closed state is cached (other processes)
TICKET_BLOCK = 8192  # ticket serials per bitmap row (1 KiB)


class StoreError(DPMarginalsError):
    """The store could not complete a write (disk full, database gone): retry later."""


class TicketUsed(ReportError):
    """A report carried a ticket that was spent already (nothing of its batch is stored)."""

    def __init__(self, index: int) -> None:
        super().__init__("its ticket was already used: each ticket admits one report; ask "
                         "/assignment for another", code="ticket_used", index=index)


@dataclass(frozen=True)
class Campaign:
    """A stored campaign: its internal number, name, plan (with its codec) and settings."""

    num: int
    name: str
    plan: Plan
    codec: PlanCodec = field(repr=False, compare=False)
    settings: CampaignSettings = field(default_factory=CampaignSettings, compare=False)


@dataclass
class _Job:
    """Work for the writer thread: a batch of reports, or a call in its own transaction."""

    campaign: int = 0
    reports: DecodedReports | None = None
    tickets: np.ndarray | None = None  # the serials of the batch's tickets
    tallies: list[tuple[int, int, np.ndarray]] = field(default_factory=list)
    call: Any = None
    result: Any = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class Store(ABC):
    """Campaigns, reports and count tensors behind one interface (SQLite or PostgreSQL)."""

    kind: str = "store"
    placeholder = "?"
    integrity_errors: tuple[type[BaseException], ...] = ()

    def __init__(self) -> None:
        self._closed = False
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._read_lock = threading.Lock()
        self._campaigns: dict[str, Campaign] = {}
        self._states: dict[int, tuple[bool, float]] = {}
        self._listeners: list[Any] = []
        self._writer_conn = self._connect()
        self._create_schema(self._writer_conn)
        self._reader_conn = self._connect()
        self._writer = threading.Thread(target=self._write_loop, name="dpmarginals-writer",
                                         daemon=True)
        self._writer.start()

    # -- back-end specifics ---------------------------------------------------------------
    @abstractmethod
    def _connect(self) -> Any: ...

    @abstractmethod
    def _schema(self) -> list[str]: ...

    @abstractmethod
    def _begin(self, conn: Any) -> None: ...

    def _lock_suffix(self) -> str:
        return ""

    def _sql(self, query: str) -> str:
        return query if self.placeholder == "?" else query.replace("?", self.placeholder)

    def _insert(self, conn: Any, campaign: int, batch: DecodedReports) -> None:
        """Insert a batch of reports (raises an integrity error on a known report id)."""
        conn.cursor().executemany(
            "INSERT INTO reports(campaign, rid, grp, payload) VALUES (?, ?, ?, ?)",
            [(campaign, rid, g, row)
             for rid, g, row in zip(batch.ids, batch.groups, batch.rows, strict=True)])

    def _insert_campaign(self, conn: Any, name: str, plan: Plan,
                         settings: CampaignSettings) -> int:
        cur = conn.execute(self._sql(
            "INSERT INTO campaigns(name, plan_hash, plan, settings, closed) "
            "VALUES (?, ?, ?, ?, 0) RETURNING num"),
            (name, plan.hash, plan.to_json(indent=None), json.dumps(settings.to_dict())))
        return int(cur.fetchone()[0])

    # -- lifecycle ------------------------------------------------------------------------
    def _read(self, query: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """All rows of one query on the reader connection (reopened if it broke)."""
        with self._read_lock:
            if self._broken(self._reader_conn):
                with contextlib.suppress(Exception):
                    self._reader_conn.close()
                self._reader_conn = self._connect()
            return list(self._reader_conn.execute(self._sql(query), params).fetchall())

    def _create_schema(self, conn: Any) -> None:
        self._begin(conn)
        try:
            for statement in self._schema():
                conn.execute(statement)
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            insert = self._sql("INSERT INTO meta(key, value) VALUES (?, ?)")
            if row is None:
                conn.execute(insert, ("schema_version", str(SCHEMA_VERSION)))
            elif int(row[0]) != SCHEMA_VERSION:
                raise DPMarginalsError(f"the store has schema version {row[0]}; this "
                                       f"dpmarginals reads version {SCHEMA_VERSION}")
            found = conn.execute("SELECT value FROM meta WHERE key = 'ticket_secret'").fetchone()
            if found is None:
                conn.execute(insert, ("ticket_secret", secrets.token_hex(32)))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def reserve_serials(self, count: int) -> int:
        """The first of ``count`` ticket serials no one else (no other server process on
        this store) will hand out."""
        def reserve(conn: Any) -> int:
            row = conn.execute("SELECT value FROM meta WHERE key = 'ticket_serial'").fetchone()
            start = int(row[0]) if row is not None else 0
            if row is None:
                conn.execute(self._sql("INSERT INTO meta(key, value) VALUES (?, ?)"),
                             ("ticket_serial", str(start + count)))
            else:
                conn.execute(self._sql("UPDATE meta SET value = ? WHERE key = 'ticket_serial'"),
                             (str(start + count),))
            return start

        return int(self._submit(_Job(call=reserve)))

    def ticket_secret(self) -> bytes:
        """The key that signs this store's tickets (made once, kept in ``meta``: tickets
        stay valid across restarts, and several servers on one PostgreSQL share it)."""
        rows = self._read("SELECT value FROM meta WHERE key = 'ticket_secret'")
        return bytes.fromhex(str(rows[0][0]))

    def on_commit(self, listener: Any) -> None:
        """Call ``listener(campaign_num)`` after each commit that added reports to it."""
        self._listeners.append(listener)

    def close(self) -> None:
        """Finish pending writes and close the connections."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._writer.join(timeout=30)
        for conn in (self._writer_conn, self._reader_conn):
            with contextlib.suppress(Exception):  # closing is best effort
                conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the writer thread ----------------------------------------------------------------
    def _submit(self, job: _Job) -> Any:
        if self._closed:
            raise StoreError("the store is closed")
        self._queue.put(job)
        while not job.done.wait(timeout=5.0):
            if not self._writer.is_alive():
                raise StoreError("the store's writer has stopped")
        if job.error is not None:
            raise job.error
        return job.result

    def _write_loop(self) -> None:
        try:
            self._write_jobs()
        except BaseException as exc:  # a bug must not leave requests waiting forever
            while True:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    job.error = StoreError(f"the store's writer failed: {exc!r}")
                    job.done.set()
            raise

    def _write_jobs(self) -> None:
        pending: _Job | None = None
        while True:
            job = pending if pending is not None else self._queue.get()
            pending = None
            if job is None:
                return
            if job.call is not None:
                self._run_call(job)
                continue
            jobs, count = [job], len(job.reports or ())
            while count < _GROUP_COMMIT_REPORTS and len(jobs) < _GROUP_COMMIT_JOBS:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None or nxt.call is not None:
                    pending = nxt
                    if nxt is None:
                        self._queue.put(None)  # stop after this group
                        pending = None
                    break
                jobs.append(nxt)
                count += len(nxt.reports or ())
            self._commit_reports(jobs)

    def _broken(self, conn: Any) -> bool:
        """Whether the writer's connection is gone (then it is reopened)."""
        return False

    def _writer_connection(self) -> Any:
        if self._broken(self._writer_conn):
            with contextlib.suppress(Exception):
                self._writer_conn.close()
            self._writer_conn = self._connect()
        return self._writer_conn

    def _run_call(self, job: _Job) -> None:
        try:
            conn = self._writer_connection()
            self._begin(conn)
            try:
                job.result = job.call(conn)
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(Exception):
                    conn.execute("ROLLBACK")
                raise
        except BaseException as exc:
            job.error = exc
        finally:
            job.done.set()

    def _commit_reports(self, jobs: list[_Job]) -> None:
        ok: list[_Job] = []
        try:
            conn = self._writer_connection()
            self._begin(conn)
            try:
                spent = self._lock_tickets(conn, jobs)
                for job in jobs:
                    batch = job.reports
                    assert batch is not None
                    conn.execute("SAVEPOINT batch")
                    try:
                        self._insert(conn, job.campaign, batch)
                    except self.integrity_errors:
                        conn.execute("ROLLBACK TO SAVEPOINT batch")
                        conn.execute("RELEASE SAVEPOINT batch")
                        job.error = self._duplicates(conn, job.campaign, batch)
                        continue
                    if job.tickets is not None:
                        used = _spend(spent, job.campaign, job.tickets)
                        if used is not None:
                            conn.execute("ROLLBACK TO SAVEPOINT batch")
                            conn.execute("RELEASE SAVEPOINT batch")
                            job.error = TicketUsed(used)
                            continue
                    conn.execute("RELEASE SAVEPOINT batch")
                    ok.append(job)
                self._write_tickets(conn, spent)
                self._add_tallies(conn, ok)
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(Exception):  # the connection may be gone
                    conn.execute("ROLLBACK")
                raise
            for job in ok:
                job.result = len(job.reports or ())
            for num in sorted({job.campaign for job in ok}):
                for listener in self._listeners:
                    with contextlib.suppress(Exception):  # a listener must not fail a commit
                        listener(num)
        except BaseException as exc:
            for job in ok:
                job.error = StoreError(f"the store could not commit: {exc}")
            for job in jobs:
                if job.error is None and job not in ok:
                    job.error = StoreError(f"the store could not commit: {exc}")
        finally:
            for job in jobs:
                job.done.set()

    def _lock_tickets(self, conn: Any, jobs: list[_Job]) -> dict[tuple[int, int], Any]:
        """The spent-ticket bitmap rows the jobs touch, created if missing and locked in
        (campaign, block) order: {(campaign, block): [bits (uint8 array), changed]}."""
        keys = sorted({(job.campaign, int(b)) for job in jobs if job.tickets is not None
                       for b in np.unique(job.tickets // TICKET_BLOCK)})
        if not keys:
            return {}
        conn.cursor().executemany(self._sql(
            "INSERT INTO tickets(campaign, block, bits) VALUES (?, ?, ?) "
            "ON CONFLICT (campaign, block) DO NOTHING"),
            [(c, b, bytes(TICKET_BLOCK // 8)) for c, b in keys])
        select = self._sql("SELECT bits FROM tickets WHERE campaign = ? AND block = ?"
                           + self._lock_suffix())
        out = {}
        for key in keys:
            row = conn.execute(select, key).fetchone()
            out[key] = [np.frombuffer(bytes(row[0]), dtype=np.uint8).copy(), False]
        return out

    def _write_tickets(self, conn: Any, spent: dict[tuple[int, int], Any]) -> None:
        update = self._sql("UPDATE tickets SET bits = ? WHERE campaign = ? AND block = ?")
        for (campaign, block), (bits, changed) in sorted(spent.items(), key=lambda kv: kv[0]):
            if changed:
                conn.execute(update, (bits.tobytes(), campaign, block))

    def _duplicates(self, conn: Any, campaign: int, batch: DecodedReports) -> ReportError:
        """The error for a batch some of whose ids are stored already (indices named)."""
        where: dict[bytes, int] = {rid: i for i, rid in enumerate(batch.ids)}
        found: list[int] = []
        ids = list(where)
        for start in range(0, len(ids), _DUPLICATE_PROBE):
            chunk = ids[start : start + _DUPLICATE_PROBE]
            marks = ", ".join("?" * len(chunk))
            cur = conn.execute(self._sql(
                f"SELECT rid FROM reports WHERE campaign = ? AND rid IN ({marks})"),
                (campaign, *chunk))
            found.extend(where[bytes(r[0])] for r in cur.fetchall())
        found.sort()
        first = found[0] if found else 0
        rid = batch.ids[first].hex()
        return ReportError(f"report_id {rid} was already received; nothing was stored"
                           + (f" ({len(found)} of its reports are duplicates)"
                              if len(found) > 1 else ""),
                           code="duplicate_report", index=first, duplicates=found)

    def _add_tallies(self, conn: Any, jobs: list[_Job]) -> None:
        acc: dict[tuple[int, int], list[Any]] = {}
        for job in jobs:
            for g, users, support in job.tallies:
                key = (job.campaign, g)
                if key in acc:
                    acc[key][0] += users
                    acc[key][1] = acc[key][1] + support
                else:
                    acc[key] = [users, support]
        select = self._sql("SELECT users, support FROM tallies WHERE campaign = ? AND grp = ?"
                           + self._lock_suffix())
        update = self._sql("UPDATE tallies SET users = ?, support = ? "
                           "WHERE campaign = ? AND grp = ?")
        for (campaign, g), (users, support) in sorted(acc.items(), key=lambda kv: kv[0]):
            row = conn.execute(select, (campaign, g)).fetchone()
            if row is None:
                raise StoreError(f"campaign {campaign} has no tally for group {g}")
            total = np.frombuffer(bytes(row[1]), dtype=_INT64) + support
            conn.execute(update, (int(row[0]) + users, total.astype(_INT64).tobytes(),
                                  campaign, g))

    # -- campaigns ------------------------------------------------------------------------
    def create_campaign(self, name: str, plan: Plan,
                        settings: CampaignSettings | None = None) -> tuple[Campaign, bool]:
        """Create a campaign (or find the same one): (campaign, created).

        A campaign of that name with another plan is a :class:`DPMarginalsError`; one with
        the same plan is returned as it is (its settings are those it was created with).
        """
        codec = PlanCodec(plan)
        chosen = settings if settings is not None else CampaignSettings()

        def create(conn: Any) -> tuple[int, bool, str]:
            row = conn.execute(self._sql("SELECT num, plan_hash, settings FROM campaigns "
                                         "WHERE name = ?"), (name,)).fetchone()
            if row is not None:
                if row[1] != plan.hash:
                    raise DPMarginalsError(f"campaign {name!r} exists with another plan "
                                           f"({row[1]})")
                return int(row[0]), False, str(row[2])
            num = self._insert_campaign(conn, name, plan, chosen)
            conn.cursor().executemany(
                self._sql("INSERT INTO tallies(campaign, grp, users, support) "
                          "VALUES (?, ?, 0, ?)"),
                [(num, g, bytes(8 * size)) for g, size in enumerate(codec.sizes)])
            return num, True, json.dumps(chosen.to_dict())

        try:
            num, created, stored = self._submit(_Job(call=create))
        except self.integrity_errors:  # another server process created it just now
            num, created, stored = self._submit(_Job(call=create))
        campaign = Campaign(num, name, plan, codec,
                            CampaignSettings.from_dict(json.loads(stored)))
        self._campaigns[name] = campaign
        return campaign, created

    def cached_campaign(self, name: str) -> Campaign | None:
        """The campaign called ``name`` if this store has it cached (never reads)."""
        return self._campaigns.get(name)

    def campaign(self, name: str) -> Campaign | None:
        """The campaign called ``name`` (cached: a campaign's plan and settings never
        change; whether it is closed is :meth:`is_closed`)."""
        found = self._campaigns.get(name)
        if found is not None:
            return found
        rows = self._read("SELECT num, plan, settings FROM campaigns WHERE name = ?", (name,))
        if not rows:
            return None
        row = rows[0]
        plan = Plan.from_dict(json.loads(row[1]))
        found = Campaign(int(row[0]), name, plan, PlanCodec(plan),
                         CampaignSettings.from_dict(json.loads(row[2])))
        self._campaigns[name] = found
        return found

    def campaigns(self) -> list[tuple[str, str]]:
        """(name, plan hash) of every campaign."""
        rows = self._read("SELECT name, plan_hash FROM campaigns ORDER BY name")
        return [(str(a), str(b)) for a, b in rows]

    def close_campaign(self, campaign: Campaign) -> None:
        """Close a campaign: no more assignments or reports (its answers stay)."""
        self._submit(_Job(call=lambda conn: conn.execute(
            self._sql("UPDATE campaigns SET closed = 1 WHERE num = ?"), (campaign.num,))))
        self._states[campaign.num] = (True, time.monotonic())

    def is_closed(self, campaign: Campaign) -> bool:
        """Whether the campaign was closed (by any server on this store; cached for a few
        seconds) or its ``expires_at`` has passed."""
        if campaign.settings.expired():
            return True
        cached = self._states.get(campaign.num)
        now = time.monotonic()
        if cached is not None and (cached[0] or now - cached[1] < _STATE_TTL):
            return cached[0]
        rows = self._read("SELECT closed FROM campaigns WHERE num = ?", (campaign.num,))
        closed = bool(rows and rows[0][0])
        self._states[campaign.num] = (closed, now)
        return closed

    # -- reports --------------------------------------------------------------------------
    def add_reports(self, campaign: Campaign, reports: DecodedReports,
                    tickets: Sequence[int] | np.ndarray | None = None) -> int:
        """Store validated reports atomically with their counts; returns how many.

        ``tickets``: the serials of the (verified) tickets the reports carried, one per
        report, spent in the same transaction.  Raises :class:`ReportError` (code
        ``duplicate_report``) if any report id is stored already, :class:`TicketUsed` if
        any ticket was spent (then nothing of the batch is stored), :class:`StoreError` if
        the commit failed.
        Returns after the commit.
        """
        if not len(reports):
            return 0
        serials = None if tickets is None else np.asarray(tickets, dtype=np.int64)
        if serials is not None and serials.shape != (len(reports),):
            raise DPMarginalsError(f"{len(reports)} reports but {serials.size} tickets")
        job = _Job(campaign=campaign.num, reports=reports, tickets=serials,
                   tallies=campaign.codec.tally(reports))
        return int(self._submit(job))

    def counts(self, campaign: Campaign) -> Counts:
        """The incremental count tensors: support per (group, cell), users per group."""
        rows = self._read("SELECT grp, users, support FROM tallies WHERE campaign = ? "
                          "ORDER BY grp", (campaign.num,))
        supports, users = campaign.codec.empty_counts()
        for g, n, blob in rows:
            supports[int(g)] = np.frombuffer(bytes(blob), dtype=_INT64).astype(np.int64)
            users[int(g)] = int(n)
        return Counts(supports, users)

    def users(self, campaign: Campaign) -> np.ndarray:
        """Reports per group (from the tallies)."""
        rows = self._read("SELECT grp, users FROM tallies WHERE campaign = ?", (campaign.num,))
        out = np.zeros(campaign.codec.m, dtype=np.int64)
        for g, n in rows:
            out[int(g)] = int(n)
        return out

    def known(self, campaign: Campaign, ids: Sequence[bytes]) -> int:
        """How many of the report ``ids`` are stored already."""
        found = 0
        unique = list(dict.fromkeys(ids))
        for start in range(0, len(unique), _DUPLICATE_PROBE):
            chunk = unique[start : start + _DUPLICATE_PROBE]
            marks = ", ".join("?" * len(chunk))
            rows = self._read(f"SELECT COUNT(*) FROM reports WHERE campaign = ? AND rid IN "
                              f"({marks})", (campaign.num, *chunk))
            found += int(rows[0][0])
        return found

    @contextlib.contextmanager
    def snapshot(self, campaign: Campaign) -> Iterator[tuple[int, Iterator[dict[str, Any]]]]:
        """``with store.snapshot(c) as (count, reports):`` every report of the campaign as
        of one moment: one read transaction on its own connection, so batches committed
        meanwhile are wholly absent and ``count`` (from the tallies) is the number of
        ``reports``.  Keep the block short on SQLite (it holds back checkpoints)."""
        conn = self._connect()
        try:
            self._begin_snapshot(conn)
            rows = conn.execute(self._sql("SELECT COALESCE(SUM(users), 0) FROM tallies "
                                          "WHERE campaign = ?"), (campaign.num,)).fetchone()
            count = int(rows[0])
            codec = campaign.codec

            def reports() -> Iterator[dict[str, Any]]:
                cur = conn.execute(self._sql("SELECT rid, grp, payload FROM reports WHERE "
                                             "campaign = ? ORDER BY rid"), (campaign.num,))
                while True:
                    page = cur.fetchmany(_EXPORT_PAGE)
                    if not page:
                        return
                    for rid, g, row in page:
                        yield codec.report_of_row(bytes(rid), int(g), bytes(row))

            yield count, reports()
        finally:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            with contextlib.suppress(Exception):
                conn.close()

    def _begin_snapshot(self, conn: Any) -> None:
        conn.execute("BEGIN")

    def _rows(self, campaign: Campaign) -> Iterator[tuple[bytes, int, bytes]]:
        """Every stored (report id, group, row), by report id, a page at a time."""
        last = b""
        query = ("SELECT rid, grp, payload FROM reports WHERE campaign = ? AND rid > ? "
                 f"ORDER BY rid LIMIT {_EXPORT_PAGE}")
        while True:
            page = self._read(query, (campaign.num, last))
            for rid, g, row in page:
                yield bytes(rid), int(g), bytes(row)
            if len(page) < _EXPORT_PAGE:
                return
            last = bytes(page[-1][0])

    def reports(self, campaign: Campaign) -> Iterator[dict[str, Any]]:
        """Every stored report as its JSON object (ordered by report id, not by arrival)."""
        codec = campaign.codec
        for rid, g, row in self._rows(campaign):
            yield codec.report_of_row(rid, g, row)

    def recount(self, campaign: Campaign) -> Counts:
        """Count tensors recomputed from the stored reports (equal to :meth:`counts`)."""
        by_group: dict[int, list[bytes]] = {}
        for _, g, row in self._rows(campaign):
            by_group.setdefault(g, []).append(row)
        codec = campaign.codec
        supports, users = codec.empty_counts()
        for g, rows in by_group.items():
            supports[g] = codec.groups[g].support(b"".join(rows))
            users[g] = len(rows)
        return Counts(supports, users)


class SQLiteStore(Store):
    """SQLite in WAL mode; ``synchronous`` FULL (default: a commit survives power loss) or
    NORMAL (survives a crash of the process, not of the machine; faster)."""

    kind = "sqlite"
    integrity_errors = (sqlite3.IntegrityError,)

    def __init__(self, path: str | Path, *, synchronous: str = "full") -> None:
        sync = synchronous.upper()
        if sync not in ("FULL", "NORMAL", "EXTRA"):
            raise DPMarginalsError(f"synchronous must be full, normal or extra, got "
                                   f"{synchronous!r}")
        self.path = Path(path)
        if str(path) in ("", ":memory:"):
            raise DPMarginalsError("the SQLite store needs a file path (it is durable)")
        if not self.path.parent.exists():
            raise DPMarginalsError(f"directory of the database does not exist: "
                                   f"{str(self.path.parent)!r}")
        self.synchronous = sync
        _private_file(self.path)
        super().__init__()

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                   timeout=30.0)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute("PRAGMA busy_timeout=30000")
        except sqlite3.DatabaseError as exc:
            raise DPMarginalsError(f"cannot open SQLite database {str(self.path)!r}: {exc}"
                                   ) from None
        return conn

    def _begin(self, conn: Any) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def _schema(self) -> list[str]:
        return [
            "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS campaigns(num INTEGER PRIMARY KEY, "
            "name TEXT NOT NULL UNIQUE, plan_hash TEXT NOT NULL, plan TEXT NOT NULL, "
            "settings TEXT NOT NULL, closed INTEGER NOT NULL DEFAULT 0)",
            "CREATE TABLE IF NOT EXISTS reports(campaign INTEGER NOT NULL, rid BLOB NOT NULL, "
            "grp INTEGER NOT NULL, payload BLOB NOT NULL, PRIMARY KEY (campaign, rid)) "
            "WITHOUT ROWID",
            "CREATE TABLE IF NOT EXISTS tallies(campaign INTEGER NOT NULL, "
            "grp INTEGER NOT NULL, users INTEGER NOT NULL, support BLOB NOT NULL, "
            "PRIMARY KEY (campaign, grp)) WITHOUT ROWID",
            "CREATE TABLE IF NOT EXISTS tickets(campaign INTEGER NOT NULL, block INTEGER NOT NULL, "
            "bits BLOB NOT NULL, PRIMARY KEY (campaign, block)) WITHOUT ROWID",
        ]

    def _begin_snapshot(self, conn: Any) -> None:
        conn.execute("BEGIN")  # deferred: the first read fixes the snapshot (WAL)


class PostgresStore(Store):
    """PostgreSQL (``postgresql://user@host:port/db``), for several server processes.

    Tallies are read ``FOR UPDATE`` in (campaign, group) order, so concurrent writers
    serialize per group without deadlocks.
    """

    kind = "postgresql"
    placeholder = "%s"

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError:
            raise DPMarginalsError("a PostgreSQL store needs psycopg: "
                                   "pip install 'psycopg[binary]'") from None
        self._psycopg = psycopg
        self.url = url
        self.integrity_errors = (psycopg.errors.UniqueViolation,)
        super().__init__()

    def _connect(self) -> Any:
        try:
            return self._psycopg.connect(self.url, autocommit=True)
        except self._psycopg.Error as exc:
            detail = " ".join(str(exc).split())  # one line
            raise DPMarginalsError(f"cannot connect to PostgreSQL: {detail}") from None

    def _begin(self, conn: Any) -> None:
        conn.execute("BEGIN")

    def _lock_suffix(self) -> str:
        return " FOR UPDATE"

    def _broken(self, conn: Any) -> bool:
        return bool(conn.closed or conn.broken)

    def _insert(self, conn: Any, campaign: int, batch: DecodedReports) -> None:
        # one statement over arrays: faster than executemany, and no pipeline to abort
        conn.execute(
            "INSERT INTO reports(campaign, rid, grp, payload) "
            "SELECT %s, * FROM unnest(%s::bytea[], %s::integer[], %s::bytea[])",
            (campaign, batch.ids, batch.groups, batch.rows))

    def _schema(self) -> list[str]:
        return [
            "SELECT pg_advisory_xact_lock(7070707)",  # concurrent servers create it once
            "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS campaigns(num BIGINT GENERATED ALWAYS AS IDENTITY "
            "PRIMARY KEY, name TEXT NOT NULL UNIQUE, plan_hash TEXT NOT NULL, plan TEXT NOT NULL, "
            "settings TEXT NOT NULL, closed INTEGER NOT NULL DEFAULT 0)",
            "CREATE TABLE IF NOT EXISTS reports(campaign BIGINT NOT NULL, rid BYTEA NOT NULL, "
            "grp INTEGER NOT NULL, payload BYTEA NOT NULL, PRIMARY KEY (campaign, rid))",
            "CREATE TABLE IF NOT EXISTS tallies(campaign BIGINT NOT NULL, grp INTEGER NOT NULL, "
            "users BIGINT NOT NULL, support BYTEA NOT NULL, PRIMARY KEY (campaign, grp))",
            "CREATE TABLE IF NOT EXISTS tickets(campaign BIGINT NOT NULL, block BIGINT NOT NULL, "
            "bits BYTEA NOT NULL, PRIMARY KEY (campaign, block))",
        ]

    def _begin_snapshot(self, conn: Any) -> None:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")



def _spend(spent: dict[tuple[int, int], Any], campaign: int, serials: np.ndarray
           ) -> int | None:
    """Mark ``serials`` spent in the locked bitmap rows; the position of the first one
    spent already (or twice in ``serials``), and then nothing is marked."""
    blocks, offsets = np.divmod(serials, TICKET_BLOCK)
    seen = np.zeros(serials.size, dtype=bool)
    for b in np.unique(blocks).tolist():
        at = blocks == b
        bits = spent[(campaign, b)][0]
        seen[at] = (bits[offsets[at] >> 3] >> (offsets[at] & 7)) & 1 == 1
    _, first = np.unique(serials, return_index=True)
    twice = np.ones(serials.size, dtype=bool)
    twice[first] = False
    bad = np.flatnonzero(seen | twice)
    if bad.size:
        return int(bad[0])
    for b in np.unique(blocks).tolist():
        at = offsets[blocks == b]
        row = spent[(campaign, b)]
        np.bitwise_or.at(row[0], at >> 3, (1 << (at & 7)).astype(np.uint8))
        row[1] = True
    return None


def _private_file(path: Path) -> None:
    """Create the database file readable by its owner only (0600), or make an existing
    one (and its WAL and shared-memory files) so; SQLite gives the WAL and shared-memory
    files it creates the database's permissions."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        for suffix in ("", "-wal", "-shm", "-journal"):
            other = Path(f"{path}{suffix}")
            if other.exists() and other.stat().st_mode & 0o077:
                os.chmod(other, 0o600)
    except OSError as exc:
        raise DPMarginalsError(f"cannot create SQLite database {str(path)!r}: "
                               f"{exc.strerror or exc}") from None


def open_store(spec: str | Path | Store, *, synchronous: str = "full") -> Store:
    """A store from a path (SQLite), ``sqlite:///path``, or ``postgresql://...`` URL."""
    if isinstance(spec, Store):
        return spec
    text = str(spec)
    if text.startswith(("postgresql://", "postgres://")):
        return PostgresStore(text)
    if text.startswith("sqlite:///"):  # sqlite:///relative/path, sqlite:////absolute/path
        text = text[len("sqlite:///") :]
    elif "://" in text:
        raise DPMarginalsError(f"unknown store URL {text!r}: use a file path, sqlite:///PATH "
                               "or postgresql://...")
    return SQLiteStore(text, synchronous=synchronous)
