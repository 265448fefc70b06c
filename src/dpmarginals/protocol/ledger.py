"""The device's privacy ledger: what this device reported, and how much epsilon it spent.

numpy and the standard library only, like :mod:`dpmarginals.protocol.client`, which consults it.
One ledger belongs to one device (one user).  It remembers:

* **one report per campaign**: asking again for a campaign gives back the stored report
  (same report id, same payload), so a retry or a second request costs nothing;
* **the group per plan hash**: the device keeps the group it first reported for a plan,
  whatever group the server assigns in a later campaign of the same plan;
* **the memoized randomization** (RAPPOR's permanent randomized response, Erlingsson et
  al., CCS 2014): per (plan hash, group, cell of the group's marginal) the randomized
  payload.  A later campaign of the same plan with the same value reuses it under a fresh
  report id and is not charged; a changed value or another plan is a fresh, charged
  randomization;
* **the epsilon spent**: in total (basic sequential composition: the sum over distinct
  randomizations) and per campaign (what that campaign added), with an optional total cap
  ``max_total_epsilon`` checked before any randomization.

The file (path chosen by the app, ``path=None`` keeps the ledger in memory) is JSON,
written atomically (a temporary file in the same directory, fsync, ``os.replace``).  A
file that cannot be read or parsed is an error naming it: the ledger is never reset
silently, since that would forget the budget already spent.  It holds the memoized cells
of the user's own record, so it belongs in the app's private storage.  One process at a
time should use a given file.

>>> ledger = Ledger(None, max_total_epsilon=2.0)
>>> ledger.spent(), ledger.remaining()
(0.0, 2.0)
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.errors import DPMarginalsError

__all__ = ["LEDGER_FORMAT", "LEDGER_VERSION", "BudgetExceeded", "Ledger", "LedgerError",
           "PlanRefused"]

LEDGER_FORMAT = "dpmarginals.ledger"
LEDGER_VERSION = 1
_TOLERANCE = 1e-9  # relative slack when comparing sums of floats with a cap
_REPORT_KEYS = frozenset({"version", "plan_hash", "group", "payload", "report_id"})


class PlanRefused(DPMarginalsError):
    """The device refuses a plan: one line naming the field and its value (no draw was made)."""


class LedgerError(DPMarginalsError):
    """The ledger file cannot be read, parsed or written (the message names the file)."""


class BudgetExceeded(DPMarginalsError):
    """A fresh randomization would take the device past its ``max_total_epsilon``."""


def _finite(value: object, field: str, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DPMarginalsError(f"{field} must be a number, got {value!r}")
    out = float(value)
    if not math.isfinite(out) or out < 0 or (positive and out == 0):
        raise DPMarginalsError(f"{field} must be a finite number "
                               f"{'> 0' if positive else '>= 0'}, got {value!r}")
    return out


def _is_index(value: object) -> bool:
    return type(value) is int and value >= 0


def _empty() -> dict[str, Any]:
    return {"format": LEDGER_FORMAT, "version": LEDGER_VERSION, "groups": {},
            "randomizations": [], "campaigns": {}}


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


class Ledger:
    """One device's record of its reports and spent epsilon (JSON file, or memory).

    ``path=None`` keeps it in memory (tests).  ``max_total_epsilon``, if given, is the most
    the device will ever spend in total; a fresh randomization beyond it raises
    :class:`BudgetExceeded` before any random draw.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *,
                 max_total_epsilon: float | None = None) -> None:
        self.path = None if path is None else Path(path)
        self.max_total_epsilon = (None if max_total_epsilon is None else
                                  _finite(max_total_epsilon, "max_total_epsilon", positive=True))
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
        self._validate(data)
        return data

    def reload(self) -> None:
        """Read the file again (after another process wrote it)."""
        self._data = self._read()

    def _validate(self, data: object) -> None:
        """Raise :class:`LedgerError` unless ``data`` has the ledger's structure."""
        if not isinstance(data, dict) or data.get("format") != LEDGER_FORMAT:
            raise self._corrupt(f"not a {LEDGER_FORMAT} object")
        if data.get("version") != LEDGER_VERSION:
            raise self._corrupt(f"version {data.get('version')!r} is not {LEDGER_VERSION}")
        groups, memos, campaigns = (data.get(k) for k in ("groups", "randomizations",
                                                            "campaigns"))
        if not isinstance(groups, dict) or not all(_is_index(g) for g in groups.values()):
            raise self._corrupt("'groups' must map plan hashes to group indices")
        if not isinstance(memos, list) or not isinstance(campaigns, dict):
            raise self._corrupt("'randomizations' must be a list and 'campaigns' an object")
        try:
            for i, memo in enumerate(memos):
                if not (isinstance(memo, dict) and isinstance(memo.get("plan_hash"), str)
                        and _is_index(memo.get("group")) and _is_index(memo.get("cell"))
                        and "payload" in memo):
                    raise self._corrupt(f"randomizations[{i}] is malformed")
                _finite(memo.get("epsilon"), f"randomizations[{i}].epsilon", positive=True)
            for key, entry in campaigns.items():
                report = entry.get("report") if isinstance(entry, dict) else None
                if not (isinstance(report, dict) and report.keys() == _REPORT_KEYS
                        and report["plan_hash"] == entry.get("plan_hash")):
                    raise self._corrupt(f"campaign {key!r} is malformed")
                _finite(entry.get("epsilon"), f"campaign {key!r} epsilon", positive=False)
        except LedgerError:
            raise
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

    # -- queries ---------------------------------------------------------------------------
    def spent(self, campaign: str | None = None) -> float:
        """Epsilon spent in total, or what ``campaign`` added (0.0 if it reused a memo)."""
        if campaign is None:
            return math.fsum(m["epsilon"] for m in self._data["randomizations"])
        entry = self._data["campaigns"].get(campaign)
        return 0.0 if entry is None else float(entry["epsilon"])

    def remaining(self) -> float | None:
        """What is left under ``max_total_epsilon`` (None without a cap)."""
        if self.max_total_epsilon is None:
            return None
        return max(self.max_total_epsilon - self.spent(), 0.0)

    def campaigns(self) -> dict[str, dict[str, Any]]:
        """Per campaign: its plan hash, the epsilon it added and the report sent (a copy)."""
        return json.loads(json.dumps(self._data["campaigns"]))

    def stored_report(self, campaign: str, plan_hash: str) -> dict[str, Any] | None:
        """The report already made for ``campaign``, or None.

        A campaign whose plan changed since is refused: the device reports once per campaign.
        """
        entry = self._data["campaigns"].get(campaign)
        if entry is None:
            return None
        if entry["plan_hash"] != plan_hash:
            raise PlanRefused(f"plan refused: campaign {campaign!r} was already reported under "
                              f"plan {entry['plan_hash'][:12]}, the server now shows plan "
                              f"{plan_hash[:12]}")
        return dict(entry["report"])

    def group_of(self, plan_hash: str) -> int | None:
        """The group this device reports for the plan ``plan_hash`` (None: not yet chosen)."""
        group = self._data["groups"].get(plan_hash)
        return None if group is None else int(group)

    def memoized_payload(self, plan_hash: str, group: int, cell: int) -> Any | None:
        """The memoized randomized payload of ``cell`` in ``group`` of the plan, or None."""
        for memo in self._data["randomizations"]:
            if (memo["plan_hash"], memo["group"], memo["cell"]) == (plan_hash, group, cell):
                return json.loads(json.dumps(memo["payload"]))
        return None

    def check_budget(self, epsilon: float) -> None:
        """Raise :class:`BudgetExceeded` if a fresh ``epsilon`` would pass the total cap."""
        cap = self.max_total_epsilon
        if cap is None:
            return
        total = self.spent()
        if total + epsilon > cap * (1 + _TOLERANCE):
            raise BudgetExceeded(f"max_total_epsilon = {cap:g} refuses a fresh randomization: "
                                 f"spent {total:g} + epsilon {epsilon:g} > {cap:g}")

    # -- recording -------------------------------------------------------------------------
    def record(self, campaign: str, report: Mapping[str, Any], *, cell: int, epsilon: float,
               fresh: bool, requested_group: int | None = None) -> None:
        """Store ``report`` as the campaign's one report, before it leaves the device.

        ``fresh``: the payload is a new randomization of ``cell`` (charged ``epsilon`` and
        memoized); otherwise it reused the memo (charged nothing).  ``requested_group``
        notes a group the server asked for but the device did not take.
        """
        if campaign in self._data["campaigns"]:
            raise DPMarginalsError(f"campaign {campaign!r} already has its report")
        eps = _finite(epsilon, "epsilon", positive=True)
        plan_hash, group = str(report["plan_hash"]), int(report["group"])
        data = json.loads(json.dumps(self._data))
        known = data["groups"].setdefault(plan_hash, group)
        if known != group:
            raise DPMarginalsError(f"plan {plan_hash[:12]} is reported in group {known}, "
                                   f"not {group}")
        if fresh:
            data["randomizations"].append({"plan_hash": plan_hash, "group": group,
                                           "cell": int(cell), "payload": report["payload"],
                                           "epsilon": eps, "first_campaign": campaign})
        entry: dict[str, Any] = {"plan_hash": plan_hash, "epsilon": eps if fresh else 0.0,
                                 "reused": not fresh, "report": dict(report)}
        if requested_group is not None and requested_group != group:
            entry["requested_group"] = int(requested_group)
        data["campaigns"][campaign] = entry
        self._write(data)
