"""Cached releases: a campaign's synopsis is recomputed when its counts change, not per read.

:class:`Releases` keeps the newest :class:`Release` of each campaign.  The store calls
:meth:`Releases.changed` after every commit that added reports; one worker thread then
recomputes the campaign's release, at most once per ``settings.refresh_seconds`` (changes
meanwhile are coalesced into the next one).  A read (:meth:`Releases.current`) is a lookup
of the newest finished release, and the answer of a marginal is a lookup too: the
k-way marginals of the plan are answered when the release is made, any other marginal on
its first read (then kept with the release).

With ``processes=1`` (what ``dpmarginals serve`` uses) the release is computed in a
separate Python process, so its pure-Python parts never hold the server's GIL while
requests are answered; ``processes=0`` computes it in the worker thread.

Each release runs :func:`~.poisoning.check_counts` on its counts first; with
``settings.exclude_flagged`` the flagged groups are left out (set to no reports) when the
method can release without them, and the release says which groups were flagged and
excluded.  Nothing is released before ``settings.min_reports`` reports.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..aggregation import answer_domain, synopsis_from_counts
from ..core.errors import DPMarginalsError
from ..core.table import MarginalTable
from ..protocol.counts import Counts
from .phases import earlier_phases
from .poisoning import Flag, check_counts
from .store import Campaign, Store

__all__ = ["Release", "Releases", "die_with_parent", "make_release"]

_ANSWERS_KEPT = 4096
_PRECOMPUTED = 2000  # at most this many k-way marginals answered when a release is made
_PRECOMPUTED_CELLS = 1 << 22
_FIRST_WAIT = 120.0
_RECHECK = 1.0  # seconds between checks for reports another server process stored
_RETRY = 5.0  # seconds before a failed release is tried again


@dataclass
class Release:
    """One release of a campaign: the synopsis of its counts at one moment (None while
    withheld, with the reason), the poisoning check's flags, the groups left out."""

    number: int
    reports: int
    synopsis: Any
    withheld: str | None = None
    flags: list[Flag] = field(default_factory=list)
    excluded: list[int] = field(default_factory=list)
    note: str | None = None
    made_at: float = field(default_factory=time.time)
    seconds: float = 0.0
    _answers: OrderedDict[Any, bytes] = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def describe(self) -> dict[str, Any]:
        """The release's metadata as answers carry it (a later phase of an adaptive
        campaign: how many phases and reports in all it pools; ``reports``: this phase's)."""
        info = getattr(self.synopsis, "info", {})
        pooled = ({"phases": info["phases"], "pooled_reports": info["n"]}
                  if info.get("phases", 1) > 1 and "n" in info else {})
        return {"number": self.number, "reports": self.reports, **pooled,
                "made_at": round(self.made_at, 3), "seconds": round(self.seconds, 3),
                "flagged_groups": sorted({f.group for f in self.flags}),
                "excluded_groups": self.excluded, "flags": [f.to_dict() for f in self.flags],
                **({"note": self.note} if self.note else {}),
                **({"withheld": self.withheld} if self.withheld else {})}

    def cached(self, key: Any) -> bytes | None:
        """The answer for ``key`` if it was made already (a dictionary lookup)."""
        return self._answers.get(key)

    def answer(self, key: Any, make: Callable[[], bytes]) -> bytes:
        """The cached answer for ``key``, made once (by ``make``) per release."""
        with self._lock:
            found = self._answers.get(key)
            if found is not None:
                self._answers.move_to_end(key)
                return found
        body = make()
        with self._lock:
            self._answers[key] = body
            while len(self._answers) > _ANSWERS_KEPT:
                self._answers.popitem(last=False)
        return body


def _without(counts: Counts, groups: list[int]) -> Counts:
    supports = [np.zeros_like(s) if g in groups else s for g, s in enumerate(counts.supports)]
    users = counts.users.copy()
    users[groups] = 0
    return Counts(supports, users)


def make_release(campaign: Campaign, counts: Counts, number: int = 1,
                 earlier: list[tuple[Any, Counts]] | None = None) -> Release:
    """The release of ``counts`` under the campaign's plan and settings (see the module);
    ``earlier``: the earlier phases' (plan, counts) of an adaptive campaign, pooled."""
    start = time.perf_counter()
    settings, plan = campaign.settings, campaign.plan
    n = counts.n
    if n == 0:
        return Release(number, 0, None, withheld="no_reports")
    if n < settings.min_reports:
        return Release(number, n, None, withheld="not_enough_reports")
    flags = check_counts(plan, counts, alpha=settings.alpha)
    excluded = sorted({f.group for f in flags}) if settings.exclude_flagged else []
    note = None
    synopsis = None
    if excluded:
        kept = _without(counts, excluded)
        if kept.n == 0:
            note = "every group with reports was flagged: released without exclusion"
        else:
            try:
                synopsis = _synopsis(plan, kept, earlier)
            except DPMarginalsError as exc:
                note = f"the flagged groups could not be left out ({exc}); released with them"
        if synopsis is None:
            excluded = []
    if synopsis is None:
        synopsis = _synopsis(plan, counts, earlier)
    release = Release(number, n, synopsis, flags=flags, excluded=excluded, note=note)
    release.seconds = time.perf_counter() - start
    return release


def _synopsis(plan: Any, counts: Counts, earlier: list[tuple[Any, Counts]] | None) -> Any:
    if earlier:  # a later phase of an adaptive campaign: every phase pooled
        return synopsis_from_counts(plan, counts, earlier=earlier)
    return synopsis_from_counts(plan, counts)


def marginal_answer(campaign: Campaign, release: Release, attrs: tuple[str, ...],
                    table: MarginalTable | None = None) -> bytes:
    """The JSON answer of one marginal of a release (``table``: that marginal, if made)."""
    if table is None:
        table = release.synopsis.marginal(list(attrs))
    body = {"campaign": campaign.name, "plan_hash": campaign.plan.hash,
            "reports": release.reports, **table.to_dict(), "release": release.describe()}
    return json.dumps(body, separators=(",", ":")).encode()


def _precompute(campaign: Campaign, release: Release) -> None:
    """Answer the plan's k-way marginals now, so their reads are lookups."""
    k = campaign.plan.params.get("k")
    domain = answer_domain(campaign.plan)
    if not isinstance(k, int) or not 1 <= k <= len(domain):
        return
    cells = 0
    for count, attrs in enumerate(itertools.combinations(domain.attributes, k)):
        cells += domain.project(attrs).cells()
        if count >= _PRECOMPUTED or cells > _PRECOMPUTED_CELLS:
            return
        release.answer((attrs, "json", False),
                       lambda a=attrs: marginal_answer(campaign, release, a))


def _detached(plan: dict[str, Any], settings: dict[str, Any], counts: Counts,
              name: str, number: int, earlier: list[tuple[dict[str, Any], Counts]] | None = None
              ) -> tuple[Any, ...]:
    """:func:`make_release` and the precomputed answers, in a worker process: everything
    goes in and out as picklable values."""
    from ..protocol.plan import Plan
    from ..protocol.reports import PlanCodec
    from .settings import CampaignSettings

    the_plan = Plan.from_dict(plan)
    campaign = Campaign(0, name, the_plan, PlanCodec(the_plan),
                        CampaignSettings.from_dict(settings))
    phases = [(Plan.from_dict(p), c) for p, c in earlier or ()]
    release = make_release(campaign, counts, number, phases)
    if release.synopsis is not None:
        _precompute(campaign, release)
    return (release.reports, release.synopsis, release.withheld, release.flags,
            release.excluded, release.note, release.seconds, dict(release._answers))


def _attached(values: tuple[Any, ...], number: int) -> Release:
    reports, synopsis, withheld, flags, excluded, note, seconds, answers = values
    release = Release(number, reports, synopsis, withheld, flags, excluded, note)
    release.seconds = seconds
    release._answers.update(answers)
    return release


#: Seconds between a release worker's checks that the server still runs.
_PARENT_CHECK = 0.5


def die_with_parent(parent: int) -> None:
    """In a release worker: exit when the server process ``parent`` is gone, even after a
    ``kill -9`` that gives it no chance to stop its children (issue #33: each crash left a
    worker and multiprocessing's resource tracker running, ~184 MiB).  Linux's
    ``PR_SET_PDEATHSIG`` kills the worker at once; a watchdog thread also exits it within
    :data:`_PARENT_CHECK` s of being re-parented, on any system.  The resource tracker
    then reads the end of its pipe (every process holding it is gone) and exits too."""
    import signal
    import sys

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # pragma: no cover - no libc: the watchdog only
            pass
    if os.getppid() != parent:  # the server died before the line above
        os._exit(0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_PARENT_CHECK)
        os._exit(0)

    threading.Thread(target=watch, name="dpmarginals-parent-watch", daemon=True).start()


@dataclass
class _State:
    campaign: Campaign
    release: Release | None = None
    dirty: bool = True
    started: float = -1e18  # monotonic time the last computation started
    checked: float = 0.0
    done: threading.Condition = field(default_factory=threading.Condition)
    error: str | None = None


class Releases:
    """The newest release of each campaign, kept current by one worker thread."""

    def __init__(self, store: Store, *, processes: int = 0) -> None:
        self.store = store
        self._pool: Any = None
        if processes:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(
                max_workers=processes, mp_context=multiprocessing.get_context("spawn"),
                initializer=die_with_parent, initargs=(os.getpid(),))
        self._states: dict[int, _State] = {}
        self._lock = threading.Condition()
        self._stopped = False
        self._worker = threading.Thread(target=self._work, name="dpmarginals-releases",
                                        daemon=True)
        self._worker.start()
        store.on_commit(self.changed)

    def close(self) -> None:
        """Stop the worker (a release being made is abandoned: the thread is a daemon)."""
        with self._lock:
            self._stopped = True
            self._lock.notify_all()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._worker.join(timeout=2)

    def _state(self, campaign: Campaign) -> _State:
        with self._lock:
            state = self._states.get(campaign.num)
            if state is None:
                state = self._states[campaign.num] = _State(campaign)
                self._lock.notify_all()
            return state

    def changed(self, num: int) -> None:
        """The campaign's counts changed (called by the store after a commit)."""
        with self._lock:
            state = self._states.get(num)
            if state is not None and not state.dirty:
                state.dirty = True
                self._lock.notify_all()

    def peek(self, campaign: Campaign) -> Release | None:
        """The newest release if there is one and no check of the store is due (never
        blocks: for the event loop)."""
        state = self._states.get(campaign.num)
        if state is None or state.release is None:
            return None
        if time.monotonic() - state.checked > _RECHECK:
            return None
        return state.release

    def current(self, campaign: Campaign, *, wait: float = _FIRST_WAIT) -> Release:
        """The newest release (waiting up to ``wait`` s for the campaign's first one)."""
        state = self._state(campaign)
        now = time.monotonic()
        release = state.release
        if release is not None and now - state.checked > _RECHECK:
            state.checked = now
            if int(self.store.users(campaign).sum()) != release.reports:
                self.changed(campaign.num)  # reports another server process stored
        if release is None:
            deadline = now + wait
            with state.done:
                while state.release is None and state.error is None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    state.done.wait(timeout=left)
            release = state.release
        if release is None:
            from .errors import ServiceError

            if state.error is not None:
                raise ServiceError(503, "release_unavailable", f"the release could not be "
                                   f"made: {state.error}", headers={"Retry-After": "5"})
            raise ServiceError(503, "release_pending", "the first release is being made; "
                               "retry shortly", headers={"Retry-After": "5"})
        return release

    def refresh(self, campaign: Campaign) -> Release:
        """Recompute now, in this thread (tests; the CLI's in-process paths)."""
        state = self._state(campaign)
        with self._lock:
            state.dirty = False
            state.started = time.monotonic()
        self._compute(state)
        assert state.release is not None
        return state.release

    # -- the worker ---------------------------------------------------------------------
    def _due(self) -> tuple[_State | None, float]:
        """The next campaign to recompute, or how long to sleep."""
        now = time.monotonic()
        sleep = 3600.0
        for state in self._states.values():
            if not state.dirty:
                continue
            ready = state.started + state.campaign.settings.refresh_seconds
            if ready <= now:
                return state, 0.0
            sleep = min(sleep, ready - now)
        return None, sleep

    def _work(self) -> None:
        while True:
            with self._lock:
                while True:
                    if self._stopped:
                        return
                    state, sleep = self._due()
                    if state is not None:
                        state.dirty = False
                        state.started = time.monotonic()
                        break
                    self._lock.wait(timeout=sleep)
            self._compute(state)

    def _compute(self, state: _State) -> None:
        campaign = state.campaign
        if self._stopped:
            return
        try:
            counts = self.store.counts(campaign)
            earlier = [(p, c) for _, p, c in earlier_phases(self.store, campaign.plan)]
            number = 1 if state.release is None else state.release.number + 1
            release = None
            if self._pool is not None:
                with contextlib.suppress(Exception):  # (e.g. a synopsis that cannot be
                    release = _attached(self._pool.submit(  # pickled: in this thread)
                        _detached, campaign.plan.to_dict(), campaign.settings.to_dict(),
                        counts, campaign.name, number,
                        [(p.to_dict(), c) for p, c in earlier]).result(), number)
            if release is None:
                release = make_release(campaign, counts, number, earlier)
                if release.synopsis is not None:
                    _precompute(campaign, release)
            error = None
        except Exception as exc:  # a store failure, or a bug: keep the last release
            release, error = None, f"{type(exc).__name__}: {exc}"[:300]
            with self._lock:  # and try again in a while
                state.dirty = True
                state.started = time.monotonic() + _RETRY
        with state.done:
            if release is not None:
                state.release = release
                state.checked = time.monotonic()
            state.error = error
            state.done.notify_all()
