"""The table of data sets: what each is, where it comes from, and how it is loaded.

Every entry names its files by their path under the data home (the layout of the
project's shared data folder) with the public URLs they can be fetched from: the
original home first (UCI, the FIMI repository), then the GitHub repository and commit
the shared copy was taken from.  Row and attribute counts are the data set *as loaded*
(after the preprocessing its loader documents); ``load`` checks the row count, so a
truncated or different copy is caught instead of silently changing an experiment.

Every file also pins the SHA-256 of its content (see :mod:`.files`), computed from the
project's shared copies, each of which is byte for byte the upstream file at the
commit named here (checked when the hashes were pinned).  Two files are not plain
copies of a download: ``kosarak-prefix`` is the first 1,166,622 bytes of FIMI's
``kosarak.dat`` (36,682 whole transactions and a cut line the loader drops), as the
GitHub mirror serves it; FIMI's full files and UCI's MSNBC ``.seq.gz`` are not held, so
their downloads are checked after conversion (the stored content), not as downloaded.
UCI's Adult files are pinned to the copies in hd-datasets (``raw/adult/``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError
from ..core.randomness import RNGLike
from . import adult as _adult
from . import builtin as _builtin
from . import taxi as _taxi
from .files import RemoteFile, copy, ensure_file, find_file, first_bytes_gzip, gunzip_into_zip
from .files import gzip_file as _gz
from .transactional import Transactions, read_msnbc, read_transactions

__all__ = [
    "REGISTRY",
    "DataSetInfo",
    "available",
    "clear_cache",
    "describe",
    "get_info",
    "load",
    "load_transactions",
]

#: ``loader(paths, d)``: ``paths`` maps each file's relative path to its local path;
#: ``d`` is only passed on to transactional loaders (top-d items).
Loader = Callable[[Mapping[str, Path], "int | None"], Dataset]


@dataclass(frozen=True)
class DataSetInfo:
    """One registered data set (metadata only; :func:`load` reads the files)."""

    name: str
    description: str
    rows: int
    attributes: int
    domain: str
    source: str
    licence: str
    citation: str
    files: tuple[RemoteFile, ...]
    loader: Loader = field(repr=False)
    max_d: int = 0  # attributes a `d=` may keep (distinct items for transactional sets)
    transactional: bool = False

    @property
    def default_d(self) -> int:
        return self.attributes


# -- helpers -----------------------------------------------------------------------------
def _gh(repo: str, commit: str, path: str) -> str:
    """URL of a file of a GitHub repository at a commit (full or abbreviated SHA)."""
    if len(commit) == 40:
        return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"
    return f"https://github.com/{repo}/raw/{commit}/{path}"


_HD = ("ryan112358/hd-datasets", "8e69757cec2ba8d430f7c915509163c708497f58")
_NIST = ("ryan112358/nist-synthetic-data-2021", "56b7bc34")
_PRIVMRF = ("caicre/PrivMRF", "12f2cae3")
_UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases"
_FIMI = "https://fimi.uantwerpen.be/data"


def _stat_key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path.resolve()), st.st_mtime_ns, st.st_size


def _readonly(arr: np.ndarray) -> np.ndarray:
    arr.flags.writeable = False
    return arr


@lru_cache(maxsize=16)
def _cached_transactions(key: tuple[str, int, int], kind: str) -> Transactions:
    path = Path(key[0])
    if kind == "msnbc":
        return read_msnbc(path)
    return read_transactions(path, drop_incomplete_last=(kind == "prefix"))


@lru_cache(maxsize=16)
def _cached_table(
    key: tuple[str, int, int], domain_key: tuple[str, int, int]
) -> tuple[np.ndarray, Domain]:
    """Integer codes of a coded CSV (plain/.gz/.zip) over the columns of its domain JSON."""
    path, domain_path = Path(key[0]), Path(domain_key[0])
    spec = Domain.load(domain_path)
    try:
        frame = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise DPMarginalsError(f"cannot read {str(path)!r}: {exc}") from None
    frame.columns = [str(c) for c in frame.columns]
    missing = [a for a in spec.attributes if a not in frame.columns]
    if missing:
        raise DPMarginalsError(f"{str(path)!r} lacks the domain's columns {missing[:5]}")
    attrs = tuple(c for c in frame.columns if c in spec)  # the file's column order
    domain = spec.project(attrs)
    sub = frame[list(attrs)]
    if sub.isna().any().any():
        col = str(sub.columns[sub.isna().any()][0])
        raise DPMarginalsError(f"{str(path)!r}: column {col!r} has a missing value")
    codes = sub.to_numpy(np.int64)
    domain.validate_codes(codes)
    return _readonly(codes), domain


@lru_cache(maxsize=4)
def _cached_adult(data_key: tuple[str, int, int], test_key: tuple[str, int, int]) -> pd.DataFrame:
    return _adult.read_adult_raw(data_key[0], test_key[0])


@lru_cache(maxsize=4)
def _cached_taxis(key: tuple[str, int, int]) -> pd.DataFrame:
    return _taxi.read_taxis(key[0])


@lru_cache(maxsize=1)
def _cached_randhie() -> Dataset:
    return _builtin.randhie()


def clear_cache() -> None:
    """Forget every parsed file (the next load parses again)."""
    for fn in (_cached_transactions, _cached_table, _cached_adult, _cached_taxis,
               _cached_randhie):
        fn.cache_clear()


def _fresh(ds: Dataset, name: str) -> Dataset:
    """A new Dataset with its own copy of the codes (the cached arrays stay untouched)."""
    return Dataset(np.array(ds.codes), ds.domain, dict(ds.labels), name)


def _labels_from_privmrf(path: Path, domain: Domain) -> dict[str, tuple[str, ...]]:
    """PrivMRF ``*_int_to_str.json``: a list (one per column index) of {code: value}."""
    try:
        spec = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DPMarginalsError(f"cannot read the labels file {str(path)!r}: {exc}") from None
    labels = {}
    for attr, size in zip(domain.attributes, domain.sizes, strict=True):
        idx = int(attr) if attr.isdigit() else None
        if idx is None or idx >= len(spec) or not isinstance(spec[idx], Mapping):
            continue
        entry = spec[idx]
        if all(str(c) in entry for c in range(size)):
            labels[attr] = tuple(str(entry[str(c)]) for c in range(size))
    return labels


# -- loaders -----------------------------------------------------------------------------
def _coded_loader(name: str, csv: str, domain_json: str, labels_json: str | None = None
                  ) -> Loader:
    def load_coded(paths: Mapping[str, Path], d: int | None) -> Dataset:
        codes, domain = _cached_table(_stat_key(paths[csv]), _stat_key(paths[domain_json]))
        labels = _labels_from_privmrf(paths[labels_json], domain) if labels_json else {}
        return Dataset(np.array(codes), domain, labels, name)

    return load_coded


def _adult_loader(name: str, variant: str) -> Loader:
    def load_adult(paths: Mapping[str, Path], d: int | None) -> Dataset:
        frame = _cached_adult(_stat_key(paths["adult-raw/adult.data.gz"]),
                              _stat_key(paths["adult-raw/adult.test.gz"]))
        return _adult.adult_dataset(frame, variant, name=name)

    return load_adult


#: How each transactional file is parsed: MSNBC .seq, a cut prefix, or a plain FIMI .dat.
_PARSE = {"msnbc": "msnbc", "kosarak": "prefix", "t10i4d100k": "dat"}


def _transactional_loader(name: str, path: str) -> Loader:
    def load_binary(paths: Mapping[str, Path], d: int | None) -> Dataset:
        t = _cached_transactions(_stat_key(paths[path]), _PARSE[name])
        return t.to_dataset(d if d is not None else REGISTRY[name].default_d, name=name)

    return load_binary


def _taxi_loader(paths: Mapping[str, Path], d: int | None) -> Dataset:
    return _taxi.taxi_flags(_cached_taxis(_stat_key(paths["nyc-taxis/taxis.csv.gz"])))


def _builtin_loader(paths: Mapping[str, Path], d: int | None) -> Dataset:
    return _fresh(_cached_randhie(), _builtin.BUILTIN)


# -- the table -----------------------------------------------------------------------------
_ADULT_RAW_FILES = (
    RemoteFile("adult-raw/adult.data.gz", ((f"{_UCI}/adult/adult.data", _gz),),
               sha256="5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d"),
    RemoteFile("adult-raw/adult.test.gz", ((f"{_UCI}/adult/adult.test", _gz),),
               sha256="a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05"),
)
_ADULT_CITE = ("Kohavi & Becker, UCI Adult (Census Income), 1996, "
               "doi:10.24432/C5XW20; CALM: Zhang et al., CCS 2018")


def _adult_set(name: str, variant: str, *, domain: str, description: str) -> DataSetInfo:
    """UCI Adult from the raw files, discretised as ``variant`` ("full", "3" or "2":
    :func:`~dpmarginals.datasets.adult.adult_dataset`)."""
    return DataSetInfo(
        name=name, description=description, rows=45_222, attributes=15, max_d=15,
        domain=domain, source=f"{_UCI}/adult/", licence="CC BY 4.0", citation=_ADULT_CITE,
        files=_ADULT_RAW_FILES, loader=_adult_loader(name, variant),
    )


def _privmrf_set(name: str, *, rows: int, attributes: int, domain: str, description: str,
                 sha256: tuple[str, str, str]) -> DataSetInfo:
    """An IPUMS extract as PrivMRF preprocessed it: a coded CSV, its domain and its labels
    (``sha256``: of the three files, in that order)."""
    data, domain_json, labels = (f"{name}/{name}.csv.gz", f"{name}/{name}-domain.json",
                                 f"{name}/{name}-labels.json")
    return DataSetInfo(
        name=name, description=description, rows=rows, attributes=attributes,
        max_d=attributes, domain=domain,
        source="https://github.com/caicre/PrivMRF (preprocess/)", licence="IPUMS terms",
        citation="Ruggles et al., IPUMS; Cai et al., PrivMRF, VLDB 2021",
        files=(
            RemoteFile(data, ((_gh(*_PRIVMRF, f"preprocess/{name}.csv"), _gz),),
                       sha256=sha256[0]),
            RemoteFile(domain_json, ((_gh(*_PRIVMRF, f"preprocess/{name}.json"), copy),),
                       sha256=sha256[1]),
            RemoteFile(labels, ((_gh(*_PRIVMRF, f"preprocess/{name}_int_to_str.json"), copy),),
                       sha256=sha256[2]),
        ),
        loader=_coded_loader(name, data, domain_json, labels),
    )


def _nist_set(name: str, *, rows: int, attributes: int, domain: str, description: str,
              citation: str, sha256: tuple[str, str]) -> DataSetInfo:
    """A discretised table of the NIST synthetic-data 2021 extensions: a zipped coded CSV
    and its domain (``sha256``: of the two files, in that order)."""
    data, domain_json = f"{name}/{name}.zip", f"{name}/{name}-domain.json"
    return DataSetInfo(
        name=name, description=description, rows=rows, attributes=attributes,
        max_d=attributes, domain=domain,
        source="https://github.com/ryan112358/nist-synthetic-data-2021 (extensions/datasets/)",
        licence="Apache-2.0 repository", citation=citation,
        files=(
            RemoteFile(data, ((_gh(*_NIST, f"extensions/datasets/{name}.zip"), copy),),
                       sha256=sha256[0]),
            RemoteFile(domain_json,
                       ((_gh(*_NIST, f"extensions/datasets/{name}-domain.json"), copy),),
                       sha256=sha256[1]),
        ),
        loader=_coded_loader(name, data, domain_json),
    )


#: Every data set, in the order ``dpmarginals datasets`` lists them.
_DATA_SETS = (
    _adult_set("adult", "full", domain="15 attrs, 2..41 values",
               description="UCI Adult census income, raw files, missing rows dropped, numeric "
               "attributes bucketized (CALM §5.1)"),
    _adult_set("adult3", "3", domain="15 attrs, 2..3 values",
               description="Adult with every attribute capped at 3 values (CALM §5.3)"),
    _adult_set("adult2", "2", domain="15 binary",
               description="Adult, binary partition of every attribute, income the label "
               "(CALM §5.4)"),
    DataSetInfo(
        name="adult-pgm",
        description="Adult as discretised by private-pgm's hd-datasets (train+test, "
        "missing values kept as a category)",
        rows=48_842, attributes=15, max_d=15, domain="15 attrs, 2..42 values",
        source="https://github.com/ryan112358/hd-datasets", licence="CC BY 4.0",
        citation="McKenna et al., private-pgm / hd-datasets; " + _ADULT_CITE,
        files=(
            RemoteFile("adult/adult.csv.gz", ((_gh(*_HD, "clean/adult.csv"), _gz),),
                       sha256="a1016062b7ea0e51919eb80239e7fd5cd73a966767848205830d0e7d23b10d2e"),
            RemoteFile("adult/adult-domain.json", ((_gh(*_HD, "clean/adult-domain.json"), copy),),
                       sha256="e9d71a0deba4a85a565013030d61d7f5ca03fa224ca46fcc0a1930b079d3a37d"),
        ),
        loader=_coded_loader("adult-pgm", "adult/adult.csv.gz", "adult/adult-domain.json"),
    ),
    DataSetInfo(
        name="msnbc",
        description="UCI MSNBC.com anonymous web sessions, 1999-09-28: 'visited category j' "
        "for the top-d of 17 page categories",
        rows=989_818, attributes=16, max_d=17, transactional=True,
        domain="16 binary (top 16 of 17 categories)",
        source=f"{_UCI}/msnbc-mld/", licence="CC BY 4.0",
        citation="Heckerman, UCI MSNBC.com Anonymous Web Data, 1999, doi:10.24432/C5390X",
        files=(RemoteFile("msnbc/msnbc990928.zip", (
            (f"{_UCI}/msnbc-mld/msnbc990928.seq.gz", gunzip_into_zip("msnbc990928.seq")),
            (_gh("numenta/nupic-legacy", "7281482d",
                 "examples/prediction/category_prediction/msnbc990928.zip"), copy),
        ), sha256="982d85eb7aff1744e64d8bfadb21f53fb921b79d53b6305d4df232da59f218fe",
            member="msnbc990928.seq"),),
        loader=_transactional_loader("msnbc", "msnbc/msnbc990928.zip"),
    ),
    DataSetInfo(
        name="kosarak",
        description="Kosarak click-stream (Hungarian news portal), the first 36,682 "
        "transactions: 'has item j' for the top-d items",
        rows=36_682, attributes=32, max_d=17_034, transactional=True,
        domain="32 binary (top 32 of 17,034 items)",
        source=f"{_FIMI}/kosarak.dat.gz", licence="FIMI repository data",
        citation="Bodon, FIMI repository (kosarak), 2003; CALM: Zhang et al., CCS 2018",
        files=(RemoteFile("kosarak-prefix/kosarak-prefix.dat.gz", (
            (f"{_FIMI}/kosarak.dat.gz", first_bytes_gzip(1_166_622)),
            (_gh("berkin768/Apriori-Method-Analysis", "1a5a4a2e1ca61bdcbe11db0670c4fa6d1179b334",
                 "kosarak.dat"), _gz),
        ), sha256="a4824eda4c747a67cd45bb9e8cc58e96645dd765eea46772ce24c73e8160eba0"),),
        loader=_transactional_loader("kosarak", "kosarak-prefix/kosarak-prefix.dat.gz"),
    ),
    DataSetInfo(
        name="t10i4d100k",
        description="IBM Quest synthetic market baskets T10I4D100K: 'has item j' for the "
        "top-d items",
        rows=100_000, attributes=32, max_d=870, transactional=True,
        domain="32 binary (top 32 of 870 items)",
        source=f"{_FIMI}/T10I4D100K.dat.gz", licence="FIMI repository data",
        citation="Agrawal & Srikant, VLDB 1994 (IBM Quest generator); FIMI repository",
        files=(RemoteFile("t10i4d100k/T10I4D100K.dat.gz", (
            (f"{_FIMI}/T10I4D100K.dat.gz", copy),
            (_gh("vidhur2k/CS6220-HW4", "febd5a69bfc73b503bf89bc1a336454f3a21dfc3",
                 "data/T10I4D100K.dat"), _gz),
        ), sha256="464d7b87aa7fdc0dc432ddad0493515569b2968b0f229ce39399c454a8c62e0c"),),
        loader=_transactional_loader("t10i4d100k", "t10i4d100k/T10I4D100K.dat.gz"),
    ),
    DataSetInfo(
        name="nyc-taxis",
        description="NYC taxi trips (March 2019 sample) touching Manhattan as the 8 binary "
        "trip flags of Cormode et al. Table 1",
        rows=5_589, attributes=8, max_d=8, domain="8 binary",
        source="https://github.com/mwaskom/seaborn-data (taxis.csv, NYC TLC trip records)",
        licence="NYC TLC public data",
        citation="NYC TLC trip records via seaborn-data; Cormode, Kulkarni & Srivastava, "
        "SIGMOD 2018",
        files=(RemoteFile(
            "nyc-taxis/taxis.csv.gz",
            ((_gh("mwaskom/seaborn-data", "71e2436a", "taxis.csv"), _gz),),
            sha256="08d6d71784dbaa2651fee37fc03389754194c05d72d2d19cbc2c799dea6ac09d"),),
        loader=_taxi_loader,
    ),
    _privmrf_set("acs", rows=47_461, attributes=23, domain="23 binary",
                 description="IPUMS American Community Survey extract, binarised "
                 "(PrivBayes/PrivMRF)",
                 sha256=("89e337a3431f9b3f76d84142cb048495fec93ff10018b1f38b25a19491582cc8",
                         "153ce7fa936e7c6a8bb70205ae5203dc028f8896cacab12e43e9e874eef7eb15",
                         "bdec50d59a927b8fe5c09fc6d6f762acbc1cc20884aefbf1ec8a282b48681c15")),
    _privmrf_set("br2000", rows=38_000, attributes=14, domain="14 attrs, 2..21 values",
                 description="IPUMS Brazil 2000 census extract (PrivBayes/PrivMRF)",
                 sha256=("a08ae196bd1facefe86039524c628b3d94bc08d1d1408fc7afc5684f03044104",
                         "1e285a611e3ded08366f237df1d669285ba1a79a55fb5e874884e94bd1c28f70",
                         "0141c1cba2723595d5b2a91d88314ae2780340cf252999ee9394178657b1272c")),
    DataSetInfo(
        name="nltcs",
        description="National Long Term Care Survey: 16 disability flags",
        rows=21_574, attributes=16, max_d=16, domain="16 binary",
        source="https://github.com/ryan112358/hd-datasets (clean/nltcs.csv)",
        licence="public survey data",
        citation="Manton, National Long Term Care Survey 1982-2004; Zhang et al., PrivBayes",
        files=(
            RemoteFile("nltcs/nltcs.csv.gz", ((_gh(*_HD, "clean/nltcs.csv"), _gz),),
                       sha256="1b8f091c6e6ab2635cc96d4f19bd39a892fc48e488b0304e92077b4e67f1f89c"),
            RemoteFile("nltcs/nltcs-domain.json",
                       ((_gh(*_NIST, "extensions/datasets/nltcs-domain.json"), copy),),
                       sha256="39ffb870b7085ba5f69bf3a3303190683d6bc1fd14c97abf3a1c335f40b32cc6"),
        ),
        loader=_coded_loader("nltcs", "nltcs/nltcs.csv.gz", "nltcs/nltcs-domain.json"),
    ),
    _nist_set("loans", rows=42_535, attributes=48, domain="48 attrs, 3..1001 values",
              description="Lending Club loans 2007-2011, discretised (NIST synthetic data 2021)",
              citation="McKenna et al., NIST Differential Privacy Temporal Map Challenge "
              "extensions",
              sha256=("841ab75ed8b2082b38267c5b97e56db1a501e992776d7797473a7459568e3e08",
                      "64b2313a24728e5d56425577a65daac0b0f499c42159f1476c5312016401035b")),
    _nist_set("fire", rows=305_119, attributes=30, domain="30 attrs, 2..742 values",
              description="San Francisco fire department calls, discretised: the 30 columns "
              "its domain covers (Box and Address dropped)",
              citation="SF Fire Department Calls for Service (DataSF); NIST DP challenge 2020",
              sha256=("d7654c74ff60013303dfd5a459d55385757da22ca1ab7ede98e7c78b74acfcfb",
                      "786c51e6e8d4b7af9e058fe938d5098a441bef66de5d9a30f99c02d14a8b8648")),
    DataSetInfo(
        name=_builtin.BUILTIN,
        description="RAND Health Insurance Experiment (built in, ships with statsmodels): "
        "8 discretised attributes",
        rows=20_190, attributes=8, max_d=8, domain="8 attrs, 2..5 values",
        source="statsmodels.datasets.randhie (RAND HIE via Cameron & Trivedi 2005)",
        licence="public domain",
        citation="RAND Health Insurance Experiment; Cameron & Trivedi, Microeconometrics, 2005",
        files=(), loader=_builtin_loader,
    ),
)


REGISTRY: dict[str, DataSetInfo] = {info.name: info for info in _DATA_SETS}
_ALIASES = {"kosarak-prefix": "kosarak", "taxi": "nyc-taxis", "taxis": "nyc-taxis",
            "nyc-taxi": "nyc-taxis", "t10": "t10i4d100k"}


# -- the API -------------------------------------------------------------------------------
def available() -> list[str]:
    """Names of all registered data sets (whether or not their files are present)."""
    return list(REGISTRY)


def get_info(name: str) -> DataSetInfo:
    """The registry entry of ``name``; unknown names are an error listing the known ones."""
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in REGISTRY:
        raise DPMarginalsError(
            f"unknown data set {name!r}; available: {', '.join(available())}"
        )
    return REGISTRY[key]


def _check_d(info: DataSetInfo, d: object) -> int | None:
    if d is None:
        return None
    if isinstance(d, bool) or not isinstance(d, int | np.integer):
        raise DPMarginalsError(f"d must be an integer, got d={d!r}")
    if not 1 <= int(d) <= info.max_d:
        what = "distinct items" if info.transactional else "attributes"
        raise DPMarginalsError(
            f"d={d} is out of range for {info.name}: it has {info.max_d} {what} "
            f"(choose 1..{info.max_d})"
        )
    return int(d)


def _local_files(info: DataSetInfo, data_home: str | os.PathLike[str] | None,
                 download: bool | None) -> dict[str, Path]:
    return {f.path: ensure_file(f, data_home, dataset=info.name, download=download)
            for f in info.files}


def load(
    name: str,
    *,
    data_home: str | os.PathLike[str] | None = None,
    d: int | None = None,
    n: int | None = None,
    rng: RNGLike = None,
    download: bool | None = None,
) -> Dataset:
    """Load a registered data set as a :class:`~dpmarginals.core.dataset.Dataset`.

    ``d`` keeps the first ``d`` attributes (for transactional sets: the top-``d`` most
    frequent items; default 16 for msnbc, 32 for kosarak and t10i4d100k).  ``n`` draws
    ``n`` users with replacement with ``rng`` (as the papers sample or replicate users to
    reach a population size; ``n`` may exceed the rows).  Missing files are downloaded
    into the data home unless ``download=False`` or ``$DPMARGINALS_OFFLINE`` is set.
    Parsed files are cached in memory; each call returns a fresh Dataset.

    >>> ds = load("randhie", d=3, n=1000, rng=0)
    >>> ds.n, ds.domain.attributes
    (1000, ('visits', 'coinsurance', 'deductible'))
    """
    info = get_info(name)
    d_ok = _check_d(info, d)
    if n is not None and (isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1):
        raise DPMarginalsError(f"n must be an integer >= 1, got n={n!r}")
    paths = _local_files(info, data_home, download)
    data = info.loader(paths, d_ok if info.transactional else None)
    if data.n != info.rows:
        where = ", ".join(str(p) for p in paths.values())
        raise DPMarginalsError(
            f"{info.name}: loaded {data.n} rows from {where}, expected {info.rows}: "
            "a truncated or different copy (delete it to download it again)"
        )
    if d_ok is not None and not info.transactional and d_ok < data.d:
        data = data.project(data.domain.attributes[:d_ok])
    if n is not None:
        data = data.sample(int(n), rng=rng)
    return data


def load_transactions(
    name: str,
    *,
    data_home: str | os.PathLike[str] | None = None,
    download: bool | None = None,
) -> Transactions:
    """The raw records of a transactional data set (msnbc, kosarak, t10i4d100k) as CSR.

    The returned object is shared with the in-memory cache: its arrays are read-only.
    """
    info = get_info(name)
    if not info.transactional:
        names = [k for k, v in REGISTRY.items() if v.transactional]
        raise DPMarginalsError(f"{info.name} is not transactional; these are: {names}")
    (path,) = _local_files(info, data_home, download).values()
    t = _cached_transactions(_stat_key(path), _PARSE[info.name])
    if t.n != info.rows:
        raise DPMarginalsError(f"{info.name}: {path} holds {t.n} records, expected {info.rows}")
    return t


def describe(data_home: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """One row per data set: name, rows, attributes, domain, source, available (locally).

    Fast: the counts come from the registry; only file existence is checked.
    """
    rows = []
    for info in REGISTRY.values():
        present = all(find_file(f.path, data_home) is not None for f in info.files)
        rows.append({
            "name": info.name, "rows": info.rows, "attributes": info.attributes,
            "domain": info.domain, "source": info.source, "available": present,
        })
    return pd.DataFrame(rows, columns=["name", "rows", "attributes", "domain", "source",
                                       "available"])
