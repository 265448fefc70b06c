"""A campaign's settings: who may read it, when it releases, how reports are admitted.

Settings are the operator's, chosen when the campaign is created (``POST /campaigns``
``{"id", "plan", "settings"}``); they are not part of the public plan (the plan's hash does
not change with them).  Every field has a default:

==================  ==========  ========================================================
field               default     meaning
==================  ==========  ========================================================
public              false       status and marginals readable without a token
min_reports         0           nothing is released before this many reports (as DAP's
                                min_batch_size)
expires_at          null        Unix time after which the campaign is closed
refresh_seconds     10          a release is recomputed when the counts changed, at most
                                once per this many seconds (0: after every change)
tickets             "assigned"  each report must carry a single-use ticket from
                                /assignment bound to its group; "any": not bound to a
                                group (the device picks); "off": no tickets
exclude_flagged     true        leave groups the poisoning check flags out of the release
                                (where the method can release without them)
alpha               1e-6        the poisoning check's family-wise false-alarm rate
status_granularity  100         /status rounds each group's count down to a multiple of
                                this (1: exact)
==================  ==========  ========================================================
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ..core.errors import DPMarginalsError

__all__ = ["TICKET_MODES", "CampaignSettings"]

TICKET_MODES = ("assigned", "any", "off")
_MAX_REFRESH = 86_400.0


@dataclass(frozen=True)
class CampaignSettings:
    """The operator's settings of one campaign (see the module's table)."""

    public: bool = False
    min_reports: int = 0
    expires_at: float | None = None
    refresh_seconds: float = 10.0
    tickets: str = "assigned"
    exclude_flagged: bool = True
    alpha: float = 1e-6
    status_granularity: int = 100

    def __post_init__(self) -> None:
        def bad(name: str, want: str) -> DPMarginalsError:
            return DPMarginalsError(f"settings.{name} must be {want}, got "
                                    f"{getattr(self, name)!r:.80}")

        for name in ("public", "exclude_flagged"):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, "true or false")
        for name, low in (("min_reports", 0), ("status_granularity", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value < 2**62:
                raise bad(name, f"an integer >= {low}")
        if self.expires_at is not None and not _number_in(self.expires_at, 0, 1e11):
            raise bad("expires_at", "null or a Unix time in seconds")
        if not _number_in(self.refresh_seconds, 0, _MAX_REFRESH):
            raise bad("refresh_seconds", f"a number of seconds in 0..{_MAX_REFRESH:g}")
        if self.tickets not in TICKET_MODES:
            raise bad("tickets", f"one of {list(TICKET_MODES)}")
        if not _number_in(self.alpha, 1e-300, 0.5) or self.alpha == 0:
            raise bad("alpha", "a probability in (0, 0.5]")

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any] | None) -> CampaignSettings:
        """From JSON: unknown fields are an error naming them."""
        if spec is None:
            return cls()
        if not isinstance(spec, Mapping):
            raise DPMarginalsError(f"settings must be a JSON object, got {spec!r:.80}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in spec if k not in known)
        if unknown:
            raise DPMarginalsError(f"settings has unknown field {unknown[0]!r:.80}; known: "
                                   f"{', '.join(sorted(known))}")
        values = dict(spec)
        for name in ("expires_at", "refresh_seconds", "alpha"):
            if isinstance(values.get(name), int) and not isinstance(values[name], bool):
                values[name] = float(values[name])
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def expired(self, now: float | None = None) -> bool:
        return self.expires_at is not None and (time.time() if now is None else now) >= \
            self.expires_at

    def with_(self, **changes: Any) -> CampaignSettings:
        return replace(self, **changes)


def _number_in(value: object, low: float, high: float) -> bool:
    return (not isinstance(value, bool) and isinstance(value, int | float)
            and math.isfinite(value) and low <= value <= high)

