"""The built-in offline data set: the RAND Health Insurance Experiment (``randhie``).

Real survey data that ships inside statsmodels (``statsmodels.datasets.randhie``), so it
loads with no data files and no network -- for ``dpmarginals demo``, tutorials and tests.

Source: the RAND Health Insurance Experiment (1974-1982), the subset distributed with
Cameron & Trivedi (2005), *Microeconometrics: Methods and Applications*, Cambridge UP,
as packaged by statsmodels.  Public domain.  **20,190 rows**: one per person-year of
participation (a person appears in up to 5 years), used here as 20,190 users.

Discretisation of the 10 published variables into 8 attributes with 2-5 values:

=============  ============================================  ===========================
attribute      from                                          values
=============  ============================================  ===========================
visits         ``mdvis``, outpatient visits to an MD         0, 1-2, 3-5, 6+
coinsurance    ``lncoins`` = ln(coinsurance% + 1)            0%, 25%, 50%, 95%, 100%
deductible     ``idp``, individual deductible plan           no, yes
incentive      ``lpi`` = ln(max(1, participation payment))   none (<= $1), <$500, $500+
mde            ``fmde`` = ln(max(1, MDE / (0.01 coins)))     0 (exp(fmde) <= 1), <=1000,
                                                             >1000
limitation     ``physlm``, physical limitation (fractional   no (< 0.5), yes (>= 0.5)
               values are imputed; rounded)
chronic        ``disea``, chronic-disease index (0..58.6)    <5, 5 to <11, >=11
health         ``hlthg``/``hlthf``/``hlthp`` (self-rated;    excellent, good, fair, poor
               none of them = excellent)
=============  ============================================  ===========================

The cut points are fixed (not fitted), chosen to give each value a sizeable share.

>>> ds = randhie()
>>> ds.n, ds.domain.sizes
(20190, (4, 5, 2, 3, 3, 2, 3, 4))
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError

__all__ = ["BUILTIN", "RANDHIE_ATTRIBUTES", "randhie", "randhie_frame"]

#: Name of the built-in data set.
BUILTIN = "randhie"

RANDHIE_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "visits": ("0", "1-2", "3-5", "6+"),
    "coinsurance": ("0%", "25%", "50%", "95%", "100%"),
    "deductible": ("no", "yes"),
    "incentive": ("none", "<$500", "$500+"),
    "mde": ("0", "<=1000", ">1000"),
    "limitation": ("no", "yes"),
    "chronic": ("<5", "5 to <11", ">=11"),
    "health": ("excellent", "good", "fair", "poor"),
}
_COINSURANCE = np.array([0, 25, 50, 95, 100])


def randhie_frame() -> pd.DataFrame:
    """The raw 10 variables from statsmodels (20,190 rows)."""
    from ..core.extras import require

    source = require("statsmodels.datasets.randhie", extra="demo",
                     what="the built-in data set randhie (statsmodels)")
    return source.load_pandas().data


def randhie(frame: pd.DataFrame | None = None) -> Dataset:
    """The discretised RAND HIE data set (see the module docstring)."""
    raw = randhie_frame() if frame is None else frame
    mdvis = raw["mdvis"].to_numpy(float)
    coins = np.expm1(raw["lncoins"].to_numpy(float))
    nearest = np.abs(coins[:, None] - _COINSURANCE[None, :]).argmin(axis=1)
    if (np.abs(_COINSURANCE[nearest] - coins) > 0.5).any():
        raise DPMarginalsError("randhie: a coinsurance rate is not one of 0/25/50/95/100%")
    incentive = np.exp(raw["lpi"].to_numpy(float))
    mde = np.exp(raw["fmde"].to_numpy(float))
    hg, hf, hp = (raw[c].to_numpy(int) for c in ("hlthg", "hlthf", "hlthp"))
    if ((hg + hf + hp) > 1).any():
        raise DPMarginalsError("randhie: a row has more than one self-rated health flag")
    columns = {
        "visits": np.searchsorted([1, 3, 6], mdvis, side="right"),
        "coinsurance": nearest,
        "deductible": raw["idp"].to_numpy(int),
        "incentive": np.searchsorted([1.5, 500], incentive, side="right"),
        "mde": np.searchsorted([1.5, 1000.5], mde, side="right"),
        "limitation": (raw["physlm"].to_numpy(float) >= 0.5).astype(int),
        "chronic": np.searchsorted([5, 11], raw["disea"].to_numpy(float), side="right"),
        "health": hg * 1 + hf * 2 + hp * 3,
    }
    attrs = tuple(RANDHIE_ATTRIBUTES)
    codes = np.column_stack([np.asarray(columns[a], dtype=np.int64) for a in attrs])
    sizes = tuple(len(v) for v in RANDHIE_ATTRIBUTES.values())
    return Dataset(codes, Domain(attrs, sizes), dict(RANDHIE_ATTRIBUTES), BUILTIN)
