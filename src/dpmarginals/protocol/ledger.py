"""The device's privacy ledger: what this device saw, reported, memoized and spent.

numpy-free, standard library only.  One ledger belongs to one device (one user).  It
remembers, in a JSON file written atomically (a temporary file in the same directory,
fsync, ``os.replace``, then the directory fsynced), under an exclusive lock:

* **campaigns** (key ``origin|campaign id``): the plan hash the device pinned on first
  sight, the collection the campaign belongs to (its *root*: ``X`` for ``X``,
  ``X.phase2``, ``X.phase3``, ...) and the one report it made, sent again on a retry
  with the ticket it was first sent with (a service that requires tickets answers a
  resend without one with 403, never with "already stored");
* **groups**: per plan hash, the group the device reports in every campaign of that plan;
* **permanent responses**: per (family, value) -- the family names the group's
  attributes, oracle and longitudinal epsilon -- the memoized randomized response of a
  memoized plan (RAPPOR's PRR), which every later report of that value noises afresh;
* **charges**: one event per report (time, campaign, per-report epsilon, and the
  permanent response it came from, if any).

**What is charged.**  A report that is not memoized costs its per-report epsilon.  The
reports of one *family* (docs/device-spec.md §4) together cost min(the sum of their
per-report epsilons, R x the longitudinal epsilon), R the number of permanent responses the
family can ever hold (one per value of its attributes, and the substitute's): the reports
of one value are a function of its permanent response, which is longitudinal-epsilon-LDP,
so they cost at most the longitudinal epsilon (post-processing; RAPPOR §4), and those of at
most R values at most R times it; the sum of epsilons is the other bound, checked by exact
enumeration on small cases but not proved for reports that share their randomness.  (That
bounds what the reports reveal about the values given when they changed, not the pattern
of changes itself, which linked reports reveal the more the more there are:
docs/device-spec.md §4, "What the charges bound".)  The charge reads the family, never the
value: what the device spends, and so
whether a cap refuses a report (which the server sees), is the same whatever values the user
had.  (Charging each value's reports min(their sum, the longitudinal epsilon), the tighter
sum for one history, would let a server whose campaigns bring a device near its cap learn
from a refusal that the value changed.)  A family whose R exceeds 2^53 - 1 is stored
without it (null) and charged in full.  A version-2 ledger (the per-value rule) is read as
version 3 with every report charged in full and its permanent responses forgotten (their
keys hold the user's values; a later report draws a new one, its family charged from zero
beside the old reports' full charges).  The total of a device is the sum of its reports'
charges; its spending in a period, the part charged within the period.  Sums are exact
rationals of the float budgets, so every client decides alike.

A file that cannot be read or parsed is an error naming it: the ledger is never reset
silently, since that would forget the budget already spent.  It holds the user's own
values (the permanent responses' keys), so it belongs in the app's private storage.

>>> ledger = Ledger(None)
>>> ledger.total(), ledger.charge(None, 1.0), ledger.charge("f1", 1.0, cap=Fraction(1, 2))
(Fraction(0, 1), Fraction(1, 1), Fraction(1, 2))
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

from ..core.errors import DPMarginalsError

try:  # POSIX: one process at a time reads-and-writes a ledger
    import fcntl
except ImportError:  # pragma: no cover - Windows: callers keep one process per ledger
    fcntl = None  # type: ignore[assignment]

__all__ = ["LEDGER_FORMAT", "LEDGER_VERSION", "MAX_RESPONSES", "BudgetExceeded", "Ledger",
           "LedgerError", "PlanRefused", "campaign_root", "family_of"]

LEDGER_FORMAT = "dpmarginals.ledger"
LEDGER_VERSION = 3
_REPORT_KEYS = frozenset({"version", "plan_hash", "group", "payload", "report_id"})
_PHASE = re.compile(r"^(?P<root>.+)\.phase(?P<phase>[0-9]+)$")
#: The most permanent responses a family may hold (beyond it: stored as null, charged in
#: full): JSON numbers keep integers exactly up to here in every language.
MAX_RESPONSES = 2**53 - 1


class PlanRefused(DPMarginalsError):
    """The device refuses a plan: one line naming the field and its value (no draw was made)."""


class LedgerError(DPMarginalsError):
    """The ledger file cannot be read, parsed or written (the message names the file)."""


class BudgetExceeded(DPMarginalsError):
    """A report would take the device past one of its caps (no draw was made)."""


def campaign_root(campaign: str) -> str:
    """The collection a campaign id belongs to: ``X`` for ``X.phase2`` (a later phase of an
    adaptive collection), else the id itself.

    >>> campaign_root("flu.phase3"), campaign_root("flu")
    ('flu', 'flu')
    """
    match = _PHASE.match(campaign)
    return match.group("root") if match and int(match.group("phase")) >= 2 else campaign


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _folder_owner(folder: Path) -> str:
    try:
        return (folder / "pid").read_text(encoding="utf-8")
    except OSError:
        return ""


def _folder_stale(folder: Path) -> tuple[str, bool]:
    """What the lock folder's pid file holds, and whether its owner is gone (a folder
    without a pid file: when it is older than a minute)."""
    seen = _folder_owner(folder)
    head = seen.split(" ")[0]
    owner = int(head) if head.isdigit() else 0
    if owner:
        return seen, not _alive(owner)
    try:
        return seen, time.time() - folder.stat().st_mtime > 60
    except OSError:
        return seen, False


@contextlib.contextmanager
def _folder_lock(path: Path, where: str, timeout: float = 30.0) -> Iterator[None]:
    """The TypeScript client's lock (``FileStore.lock``, clients/typescript/src/node.ts),
    the same protocol: a folder ``<ledger>.lock-*`` made whole (its owner's pid and a
    random token in ``pid``) and renamed to ``<ledger>.lockdir``, which is atomic and fails
    while another holds it; a dead owner's folder is moved aside and removed (a live
    one's never is: the waiter times out), one moved aside that turns out to be a live
    holder's is put back, and a holder releases only its own."""
    lock = path.with_name(path.name + ".lockdir")
    me = f"{os.getpid()} {secrets.token_hex(8)}"
    deadline = time.monotonic() + timeout

    def made() -> Path:
        folder = Path(tempfile.mkdtemp(prefix=f"{path.name}.lock-", dir=path.parent))
        (folder / "pid").write_text(me, encoding="utf-8")
        return folder

    try:
        mine = made()
    except OSError as exc:
        raise LedgerError(f"cannot lock {where}: {exc}") from None
    try:
        while True:
            try:
                os.rename(mine, lock)
                break
            except FileNotFoundError:  # swept as a stale one by another process
                mine = made()
                continue
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EPERM):
                    raise LedgerError(f"cannot lock {where}: {exc}") from None
            seen, gone = _folder_stale(lock)
            if gone:
                aside = lock.with_name(f"{lock.name}.stale-{secrets.token_hex(6)}")
                try:
                    os.rename(lock, aside)
                except OSError:
                    continue
                if _folder_owner(aside) == seen:
                    shutil.rmtree(aside, ignore_errors=True)
                else:  # another waiter broke it first and a live holder took the path
                    with contextlib.suppress(OSError):
                        os.rename(aside, lock)
                continue
            if time.monotonic() > deadline:
                head = seen.split(" ")[0] or "?"
                raise LedgerError(f"cannot lock {where}: {lock} is held by process {head}")
            time.sleep(0.005 + secrets.randbelow(20) / 1000)
    except BaseException:
        shutil.rmtree(mine, ignore_errors=True)
        raise
    try:
        for entry in path.parent.glob(f"{path.name}.lockdir.stale-*"):
            shutil.rmtree(entry, ignore_errors=True)
        for entry in path.parent.glob(f"{path.name}.lock-*"):  # killed before its rename
            if _folder_stale(entry)[1]:
                shutil.rmtree(entry, ignore_errors=True)
        yield
    finally:  # moved aside whole first: the lock's path is never an empty folder
        if _folder_owner(lock) == me:
            gone = lock.with_name(f"{lock.name}.stale-{secrets.token_hex(6)}")
            os.rename(lock, gone)
            shutil.rmtree(gone, ignore_errors=True)


def family_of(permanent: str) -> str:
    """The family a permanent response's key (``family:value``) belongs to.

    >>> family_of("3f2a:substitute")
    '3f2a'
    """
    return permanent.rsplit(":", 1)[0]


def _finite(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DPMarginalsError(f"{field} must be a number, got {value!r}")
    try:
        out = float(value)
    except OverflowError:  # an integer beyond the floats
        out = math.inf
    if not math.isfinite(out) or out < 0:
        raise DPMarginalsError(f"{field} must be a finite number >= 0, got {value!r}")
    return out


def _empty() -> dict[str, Any]:
    return {"format": LEDGER_FORMAT, "version": LEDGER_VERSION, "campaigns": {},
            "groups": {}, "permanent": {}, "charges": []}


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


class Ledger:
    """One device's record (a JSON file, or memory with ``path=None``); see the module
    docstring.  ``clock`` gives the time charges are recorded at (seconds)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = None if path is None else Path(path)
        self.clock = clock
        self._data = self._read()

    # -- reading and writing ---------------------------------------------------------------
    def _where(self) -> str:
        return f"ledger {str(self.path)!r}"

    def _corrupt(self, why: str) -> LedgerError:
        return LedgerError(f"{self._where()} is corrupt ({why}); it records the privacy budget "
                           "already spent: restore it from a backup (deleting it forgets that "
                           "budget)")

    def _read(self) -> dict[str, Any]:
        if self.path is None:
            return _empty()
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return _empty()  # a new device
        except (OSError, UnicodeDecodeError) as exc:
            raise LedgerError(f"cannot read {self._where()}: {exc}") from None
        try:
            data = json.loads(text, parse_constant=_refuse_constant)
        except ValueError as exc:
            raise self._corrupt(f"not JSON: {exc}") from None
        self._upgrade(data)
        self._validate(data)
        return data

    @staticmethod
    def _upgrade(data: dict[str, Any]) -> None:
        """A version-2 ledger (charges per value) as version 3: each report charged in full
        (what it cost under any rule), the permanent responses forgotten (module docstring)."""
        if isinstance(data, dict) and data.get("version") == 2:
            data["version"] = LEDGER_VERSION
            if isinstance(data.get("permanent"), dict):
                data["permanent"] = {}
            for event in data.get("charges") if isinstance(data.get("charges"), list) else []:
                if isinstance(event, dict):
                    event["permanent"] = None

    def reload(self) -> None:
        """Read the file again (another process may have written it)."""
        self._data = self._read()

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the ledger's locks and read it afresh: a check-then-charge inside is atomic
        against other processes of the device.  Two locks, POSIX only: an flock on a
        ``.lock`` file beside it (Python processes; released by the kernel if the process
        dies), then the TypeScript client's lock folder (:func:`_folder_lock`), so a
        Python and a Node client may share one ledger file."""
        if self.path is None or fcntl is None:
            yield
            return
        lock = self.path.with_name(self.path.name + ".lock")
        try:
            handle = open(lock, "a")  # noqa: SIM115
        except OSError as exc:
            raise LedgerError(f"cannot lock {self._where()}: {exc}") from None
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                with _folder_lock(self.path, self._where()):
                    for stale in self.path.parent.glob(f".{self.path.name}.*.tmp"):
                        with contextlib.suppress(OSError):  # a writer killed mid-write
                            stale.unlink()
                    self.reload()
                    yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _validate(self, data: object) -> None:
        """Raise :class:`LedgerError` unless ``data`` has the ledger's structure."""
        if not isinstance(data, dict) or data.get("format") != LEDGER_FORMAT:
            raise self._corrupt(f"not a {LEDGER_FORMAT} object")
        if data.get("version") != LEDGER_VERSION:
            raise self._corrupt(f"version {data.get('version')!r} is not one this dpmarginals "
                                f"reads (2 or {LEDGER_VERSION})")
        campaigns, groups, permanent, charges = (data.get(k) for k in (
            "campaigns", "groups", "permanent", "charges"))
        if not (isinstance(campaigns, dict) and isinstance(groups, dict)
                and isinstance(permanent, dict) and isinstance(charges, list)):
            raise self._corrupt("'campaigns', 'groups', 'permanent' must be objects and "
                                "'charges' a list")
        if not all(type(g) is int and g >= 0 for g in groups.values()):
            raise self._corrupt("'groups' must map plan hashes to group indices")
        for key, entry in campaigns.items():
            report = entry.get("report") if isinstance(entry, dict) else None
            if not (isinstance(entry, dict) and isinstance(entry.get("plan_hash"), str)
                    and isinstance(entry.get("root"), str)
                    and (report is None or (isinstance(report, dict)
                                            and report.keys() == _REPORT_KEYS
                                            and report["plan_hash"] == entry["plan_hash"]))
                    and (entry.get("ticket") is None or isinstance(entry["ticket"], str))):
                raise self._corrupt(f"campaign {key!r} is malformed")
        for key, memo in permanent.items():
            if not (isinstance(memo, dict) and "response" in memo):
                raise self._corrupt(f"permanent response {key!r} is malformed")
            self._number(memo.get("longitudinal"), f"permanent[{key!r}].longitudinal")
            if "responses" not in memo:
                raise self._corrupt(f"permanent[{key!r}].responses is missing")
            responses = memo["responses"]
            if responses is not None and not (type(responses) is int
                                              and 2 <= responses <= MAX_RESPONSES):
                raise self._corrupt(f"permanent[{key!r}].responses must be a count in 2.."
                                    f"2^53 - 1 or null, got {responses!r}")
        for i, event in enumerate(charges):
            if not (isinstance(event, dict) and isinstance(event.get("campaign"), str)
                    and (event.get("permanent") is None or event["permanent"] in permanent)):
                raise self._corrupt(f"charges[{i}] is malformed")
            self._number(event.get("epsilon"), f"charges[{i}].epsilon")
            self._number(event.get("time"), f"charges[{i}].time")

    def _number(self, value: object, field: str) -> float:
        try:
            return _finite(value, field)
        except DPMarginalsError as exc:
            raise self._corrupt(str(exc)) from None

    def _write(self, data: dict[str, Any]) -> None:
        """Replace the file atomically with ``data`` (memory mode: just keep it)."""
        if self.path is not None:
            text = json.dumps(data, indent=1, sort_keys=True, allow_nan=False)
            folder = self.path.parent
            try:
                fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{self.path.name}.",
                                           suffix=".tmp")
                try:
                    with os.fdopen(fd, "w", encoding="utf-8") as handle:
                        handle.write(text + "\n")
                        handle.flush()
                        os.fsync(handle.fileno())
                    os.replace(tmp, self.path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                    raise
                with contextlib.suppress(OSError):  # make the rename durable (POSIX)
                    dir_fd = os.open(folder, os.O_RDONLY)
                    try:
                        os.fsync(dir_fd)
                    finally:
                        os.close(dir_fd)
            except OSError as exc:
                raise LedgerError(f"cannot write {self._where()}: {exc}") from None
        self._data = data

    def _copy(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._data))

    # -- what was spent --------------------------------------------------------------------
    def _family_cap(self, permanent: str | None) -> Fraction | None:
        """What all reports of ``permanent``'s family may cost together (None: each is
        charged in full): R x its longitudinal epsilon (module docstring)."""
        memo = None if permanent is None else self._data["permanent"].get(permanent)
        if memo is None or memo["responses"] is None:
            return None
        return memo["responses"] * Fraction(memo["longitudinal"])

    def _event_charges(self) -> list[tuple[float, Fraction]]:
        """(time, charge) of every report event, in the order they were made."""
        used: dict[str, Fraction] = {}
        out = []
        for event in self._data["charges"]:
            eps, memo = Fraction(event["epsilon"]), event.get("permanent")
            cap = self._family_cap(memo)
            if cap is None:
                charge = eps
            else:
                before = used.get(family_of(memo), Fraction(0))
                used[family_of(memo)] = before + eps
                charge = min(before + eps, cap) - min(before, cap)
            out.append((float(event["time"]), charge))
        return out

    def total(self) -> Fraction:
        """Epsilon spent over the device's life, exactly."""
        return sum((c for _, c in self._event_charges()), Fraction(0))

    def spent_since(self, since: float) -> Fraction:
        """Epsilon charged after time ``since`` (a window (since, now])."""
        return sum((c for t, c in self._event_charges() if t > since), Fraction(0))

    def spent(self, campaign: str | None = None) -> float:
        """Epsilon spent in total, or what ``campaign`` (its ledger key) added."""
        if campaign is None:
            return float(self.total())
        charges = self._event_charges()
        return float(sum((c for (_, c), e in zip(charges, self._data["charges"], strict=True)
                          if e["campaign"] == campaign), Fraction(0)))

    def charge(self, family: str | None, epsilon: float, *, cap: Fraction | None = None
               ) -> Fraction:
        """What a report at per-report ``epsilon`` would add now to what its ``family``'s
        reports cost (None: not memoized), whose reports may cost ``cap`` together (None:
        charged in full).  The value is not an argument: the charge cannot depend on it."""
        eps = Fraction(epsilon)
        if family is None or cap is None:
            return eps
        before = Fraction(0)
        for event in self._data["charges"]:
            memo = event.get("permanent")
            if memo is None or family_of(memo) != family:
                continue
            stored = self._family_cap(memo)
            if stored is not None and stored != cap:  # R and L are the family's: an edit
                raise self._corrupt(f"permanent[{memo!r}] allows {float(stored):g} for its "
                                    f"family, whose plan allows {float(cap):g}")
            before += Fraction(event["epsilon"]) if stored is not None else 0
        return min(before + eps, cap) - min(before, cap)

    def keep_ticket(self, key: str, ticket: str) -> None:
        """Keep the ticket campaign ``key``'s report is sent with: a later resend carries it
        again, so a service that requires tickets answers that it holds the report (a
        duplicate, delivered) instead of refusing a report without its ticket."""
        entry = self._data["campaigns"].get(key)
        if entry is None or entry["report"] is None:
            raise DPMarginalsError(f"campaign {key!r} has no report to keep a ticket for")
        if entry.get("ticket") == ticket:
            return
        data = self._copy()
        data["campaigns"][key]["ticket"] = ticket
        self._write(data)

    # -- campaigns ---------------------------------------------------------------------------
    def campaign(self, key: str) -> dict[str, Any] | None:
        """The campaign's entry (plan hash, root, report) or None (a copy)."""
        entry = self._data["campaigns"].get(key)
        return None if entry is None else json.loads(json.dumps(entry))

    def campaigns(self) -> dict[str, dict[str, Any]]:
        """Every campaign's entry (a copy)."""
        return self._copy()["campaigns"]

    def group_of(self, plan_hash: str) -> int | None:
        """The group this device reports for the plan ``plan_hash`` (None: not yet chosen)."""
        group = self._data["groups"].get(plan_hash)
        return None if group is None else int(group)

    def permanent_response(self, key: str) -> Any | None:
        """The memoized permanent response ``key`` (family and value), or None."""
        memo = self._data["permanent"].get(key)
        return None if memo is None else json.loads(json.dumps(memo["response"]))

    def pin(self, key: str, root: str, plan_hash: str) -> None:
        """Pin campaign ``key`` (of collection ``root``) to ``plan_hash`` (first sight)."""
        entry = self._data["campaigns"].get(key)
        if entry is not None:
            if entry["plan_hash"] != plan_hash:
                raise PlanRefused(f"plan refused: campaign {key!r} is pinned to plan "
                                  f"{entry['plan_hash'][:12]}, not {plan_hash[:12]}")
            return
        data = self._copy()
        data["campaigns"][key] = {"plan_hash": plan_hash, "root": root, "report": None,
                                  "pinned_at": self.clock()}
        self._write(data)

    def record(self, key: str, report: Mapping[str, Any], *, epsilon: float,
               permanent: tuple[str, Any, float, int | None] | None = None) -> None:
        """Store ``report`` as campaign ``key``'s one report and charge it, in one atomic
        write, before the report leaves the device.  ``permanent``: (key, response,
        longitudinal epsilon, R) of the permanent response it noised (stored if new; R: how
        many its family can hold, module docstring)."""
        entry = self._data["campaigns"].get(key)
        if entry is None or entry["report"] is not None:
            raise DPMarginalsError(f"campaign {key!r} is not pinned, or already reported")
        plan_hash, group = str(report["plan_hash"]), int(report["group"])
        data = self._copy()
        known = data["groups"].setdefault(plan_hash, group)
        if known != group:
            raise DPMarginalsError(f"plan {plan_hash[:12]} is reported in group {known}, "
                                   f"not {group}")
        memo = None
        if permanent is not None:
            memo, response, longitudinal, responses = permanent
            data["permanent"].setdefault(memo, {"response": response,
                                                "longitudinal": float(longitudinal),
                                                "responses": responses})
        data["campaigns"][key]["report"] = dict(report)
        data["charges"].append({"time": self.clock(), "campaign": key,
                                "epsilon": float(epsilon), "permanent": memo})
        self._write(data)
