"""NYC taxi trips as the 8 binary trip flags of Cormode, Kulkarni & Srivastava (SIGMOD'18).

Input: seaborn's ``taxis.csv`` -- 6,433 real yellow/green cab trips of March 2019 (NYC
TLC trip records) with pickup/dropoff timestamps, distance, fare, tip, tolls, total,
payment (``credit card`` / ``cash``, 44 missing) and pickup/dropoff zone and borough.

Like the paper (§5.1: "we select out the ... records having pickup and/or drop-off
locations inside Manhattan") only trips with a Manhattan pickup or dropoff are kept:
**5,589** trips.  The flags of Table 1, in its order, and how each is derived:

==========  =====================================  ==========================================
flag        Table 1                                derived from
==========  =====================================  ==========================================
CC          paid by credit card?                   ``payment == "credit card"`` (missing -> 0)
Toll        paid a toll?                           ``tolls > 0``
Far         distance >= 10 miles?                  ``distance >= 10``
Night_pick  pickup time >= 8 PM?                   pickup time of day >= 20:00:00
Night_drop  drop-off time <= 3 AM?                 dropoff time of day <= 03:00:00
M_pick      origin within Manhattan?               ``pickup_borough == "Manhattan"``
M_drop      destination within Manhattan?          ``dropoff_borough == "Manhattan"``
Tip         tip >= 25% of the total fare?          ``tip >= 0.25 * fare`` (the metered fare)
==========  =====================================  ==========================================

All 8 flags are derivable; two readings needed a choice.  *Tip*: "total fare" is read
as the metered fare (``fare``, TLC's ``fare_amount``), because the ``total`` column
includes the tip itself; tips of cash trips are not recorded, so here Tip implies CC
(the strong CC-Tip association of the paper's Figure 3).  *Night_drop* follows the table literally
(00:00-03:00).  Trips with an unknown borough (outside the zone map) count as not in
Manhattan.  The paper used 3M trips of 2013-16; this sample is small (sample users with
replacement, ``n=``, to reach the paper's population sizes).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError

__all__ = ["TAXI_FLAGS", "read_taxis", "taxi_flags"]

TAXI_FLAGS: tuple[str, ...] = (
    "CC", "Toll", "Far", "Night_pick", "Night_drop", "M_pick", "M_drop", "Tip",
)
_NEEDED = ("pickup", "dropoff", "distance", "fare", "tip", "tolls", "payment",
           "pickup_borough", "dropoff_borough")


def read_taxis(path: str | Path) -> pd.DataFrame:
    """The raw trips of seaborn's ``taxis.csv`` (plain or ``.gz``)."""
    try:
        frame = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DPMarginalsError(f"cannot read taxi trips {str(path)!r}: {exc}") from None
    missing = [c for c in _NEEDED if c not in frame.columns]
    if missing:
        raise DPMarginalsError(f"taxi file {str(path)!r} lacks the columns {missing}")
    return frame


def taxi_flags(frame: pd.DataFrame, *, manhattan_only: bool = True, name: str = "nyc-taxis"
               ) -> Dataset:
    """The 8 binary flags of Cormode et al. Table 1 (see the module docstring)."""
    pickup = pd.to_datetime(frame["pickup"], errors="coerce")
    dropoff = pd.to_datetime(frame["dropoff"], errors="coerce")
    if pickup.isna().any() or dropoff.isna().any():
        raise DPMarginalsError("taxi trips have unreadable pickup/dropoff timestamps")
    m_pick = frame["pickup_borough"].eq("Manhattan").to_numpy()
    m_drop = frame["dropoff_borough"].eq("Manhattan").to_numpy()

    def seconds(ts: pd.Series) -> np.ndarray:
        return (ts.dt.hour * 3600 + ts.dt.minute * 60 + ts.dt.second).to_numpy()

    flags = {
        "CC": frame["payment"].eq("credit card").to_numpy(),
        "Toll": frame["tolls"].to_numpy(float) > 0,
        "Far": frame["distance"].to_numpy(float) >= 10,
        "Night_pick": seconds(pickup) >= 20 * 3600,
        "Night_drop": seconds(dropoff) <= 3 * 3600,
        "M_pick": m_pick,
        "M_drop": m_drop,
        "Tip": frame["tip"].to_numpy(float) >= 0.25 * frame["fare"].to_numpy(float),
    }
    codes = np.column_stack([flags[f] for f in TAXI_FLAGS]).astype(np.uint8)
    if manhattan_only:
        codes = codes[m_pick | m_drop]
    labels = {f: ("no", "yes") for f in TAXI_FLAGS}
    return Dataset(codes, Domain(TAXI_FLAGS, (2,) * len(TAXI_FLAGS)), labels, name)
