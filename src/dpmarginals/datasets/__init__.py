"""Real data sets used by the papers, with their preprocessing, plus a built-in one.

>>> from dpmarginals import datasets
>>> "msnbc" in datasets.available()
True
>>> ds = datasets.load("randhie")          # built in: no files, no network
>>> ds.n, ds.d
(20190, 8)

``load(name, *, data_home=None, d=None, n=None, rng=None, download=None)`` reads a data
set from the data home (argument, ``$DPMARGINALS_DATA``, then the user cache; see
:mod:`dpmarginals.datasets.files`), downloading a missing file from its public source
when online.  ``describe()`` lists every data set and whether it is present locally.
Each loader's module documents its preprocessing: :mod:`.adult` (adult, adult3, adult2),
:mod:`.transactional` (msnbc, kosarak, t10i4d100k), :mod:`.taxi` (nyc-taxis),
:mod:`.builtin` (randhie); acs, br2000, nltcs, loans, fire and adult-pgm are read as
coded, with their domain files.
"""

from __future__ import annotations

from .builtin import BUILTIN
from .files import data_home, fetch
from .registry import (
    REGISTRY,
    DataSetInfo,
    available,
    clear_cache,
    describe,
    get_info,
    load,
    load_transactions,
)
from .transactional import Transactions, parse_transactions, read_transactions

__all__ = [
    "BUILTIN",
    "REGISTRY",
    "DataSetInfo",
    "Transactions",
    "available",
    "clear_cache",
    "data_home",
    "describe",
    "fetch",
    "get_info",
    "load",
    "load_transactions",
    "parse_transactions",
    "read_transactions",
]
