"""The one way to make a private release from a table of people (issue #15).

:func:`release` reads the user's own values over a declared public domain, randomizes
every record on the per-user path with the operating system's secure randomness (no seed
is accepted: seeds are for simulation, :meth:`Method.run`), and returns a synopsis marked
private with its guarantee (:class:`~dpmarginals.core.provenance.Provenance`).

>>> import pandas as pd
>>> frame = pd.DataFrame({"sex": ["f", "m"] * 500, "smoker": ["no", "no", "yes", "no"] * 250})
>>> domain = {"sex": ["f", "m"], "smoker": ["no", "yes"]}
>>> r = release(frame, domain, method="calm", epsilon=1.0, k=2)
>>> r.privacy.private, r.privacy.model, r.marginal(["smoker"]).to_frame()["smoker"].tolist()
(True, 'local', ['no', 'yes'])
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from .central.accounting import check_delta
from .central.contingency import RANDOMNESS
from .central.residual import RANDOMNESS as RESIDUAL_RANDOMNESS
from .core.dataset import Dataset
from .core.domain import Domain
from .core.errors import DPMarginalsError, PrivacyLeakWarning, check_budget
from .core.extras import require_extra
from .core.provenance import (
    CENTRAL_UNIT,
    LOCAL_UNIT,
    OS_RANDOMNESS,
    Provenance,
    warn_if_not_private,
)
from .protocol.plan import Plan, warn_uncovered
from .protocol.reports import MAX_GROUP_CELLS
from .synopsis.base import SYNOPSIS_FORMAT, Synopsis, load_synopsis, read_json

__all__ = ["CENTRAL_METHODS", "MODELS", "load_release", "release", "resolve_method"]

CENTRAL_METHODS = frozenset({"aim", "mst", "priview", "residual"})
#: The extra each central method's private release needs (checked before anything else).
CENTRAL_EXTRAS = {"aim": "tables", "mst": "tables", "priview": "central", "residual": "central"}
#: Central methods that are (epsilon, delta)-DP (the others are pure epsilon-DP).
APPROXIMATE_METHODS = frozenset({"aim", "mst", "residual"})
MODELS = ("local", "central")
_SEEDS = ("rng", "seed", "random_state")


#: The smallest epsilon a release takes: the noise on a count then has scale 10^12 or more,
#: beyond any table's rows, and below it some samplers' scales overflow (OpenDP's at 1e-300).
MIN_EPSILON = 1e-12


def release(
    data: pd.DataFrame | Dataset | str | Path,
    domain: Domain | Mapping[str, Any] | str | Path | None = None,
    *,
    method: str | None = None,
    epsilon: float,
    delta: float | None = None,
    model: str | None = None,
    k: int = 3,
    domain_from_data: bool = False,
    extra_columns: str = "error",
    **params: Any,
) -> Synopsis:
    """A private release of ``data`` (a DataFrame, a CSV/Parquet path, or a Dataset).

    ``domain``: the public domain (a :class:`Domain`, a domain dict, or a JSON path);
    required unless ``data`` is a :class:`Dataset` (whose domain was declared when it was
    built) or ``domain_from_data=True`` (which reads it off the data, with a
    :class:`PrivacyLeakWarning`; the file is then marked not private, since the domain
    reveals the data's values).  ``model``: ``"local"`` (every person randomizes her own
    record; default method ``auto``, :mod:`dpmarginals.local.auto`, which picks calm, calm-pgm
    or the adaptive method from the public facts and records which and why in
    ``info["auto"]``; the privacy mark names the method picked) or ``"central"`` (a
    curator holds the table; default method ``aim``, also ``mst``, ``priview`` and
    ``residual``); by default the method's own.  ``delta``: for ``aim``, ``mst`` and
    ``residual``, which are (epsilon, delta)-DP (well below 1/n, e.g. 1e-9); the other
    methods are pure epsilon-DP and take none.  ``k``: the marginals to answer well (AIM's
    workload: all k-way marginals).  ``params`` go to the method (e.g. ``m``, ``l``,
    ``oracle``, ``inference``, ``postprocess``: methods whose default is unbiased tables
    publish Norm-Sub'ed ones unless ``postprocess="none"``, ResidualPlanner its non-negative
    least-squares answer (``"nonneg"``); AIM's ``max_model_size``, ``rounds``, ``iters``);
    a seed or ``per_user=False`` is refused.
    """
    from .methods import make

    epsilon = check_budget(epsilon)
    if epsilon < MIN_EPSILON:
        raise DPMarginalsError(f"epsilon = {epsilon!r} is below {MIN_EPSILON:g}: the noise would "
                               "exceed any count (and its scale overflows some samplers); "
                               "every answer would be noise")
    for key in (*_SEEDS, "per_user", "sampler"):
        if key in params:
            raise DPMarginalsError(
                f"release does not take {key!r}: every record is randomized on the per-user "
                "path with the OS's secure randomness (for a seeded simulation use "
                "make(method, ...).run(data, rng=seed))")
    name, central = resolve_method(method, model, delta, local_default="auto")
    if central:
        require_extra(CENTRAL_EXTRAS[name], what=f"--model central --method {name}")
    dataset = _dataset(data, domain, domain_from_data, extra_columns)
    extra: dict[str, Any] = {"per_user": True}
    if name == "priview":
        extra = {"sampler": "opendp"}
    elif central:
        _check_delta(float(delta), dataset.n)  # type: ignore[arg-type]
        extra = {"delta": delta}
    if name == "auto":
        _check_auto_params(params)
    algo = make(name, epsilon=epsilon, k=k, **extra, **params)
    if "postprocess" not in params and getattr(algo, "postprocess", None) == "none":
        # a published table is a distribution (FT, AM, Marg*); ResidualPlanner's own
        # default, "nonneg", already is one
        algo.postprocess = "norm_sub"
    _check_size(algo, dataset)
    synopsis = algo.run(dataset, rng=None)
    info = getattr(synopsis, "info", {})
    for key in [key for key in info if "seconds" in key]:
        del info[key]  # timings depend on the data and are not protected
    leak = ("the domain was read off the private data (domain_from_data): its values are "
            "published unprotected" if dataset.domain_from_data else None)
    randomness = OS_RANDOMNESS
    if central:
        randomness = {"residual": RESIDUAL_RANDOMNESS, "priview": "OpenDP's discrete Laplace "
                      "sampler"}.get(name, RANDOMNESS)
    chosen = info.get("auto", {}).get("chose") if name == "auto" else None
    synopsis.provenance = Provenance(
        private=leak is None, model="central" if central else "local",
        method=chosen or algo.name,
        epsilon=float(algo.epsilon), delta=float(delta or 0.0),
        unit=CENTRAL_UNIT if central else LOCAL_UNIT, randomness=randomness,
        plan_hash=info.get("plan_hash"), reason=leak)
    return synopsis


def resolve_method(method: str | None, model: str | None,
                   delta: float | None, local_default: str = "calm") -> tuple[str, bool]:
    """The method's registry name and whether it is central; a wrong pairing of
    ``model``, ``method`` and ``delta`` is a one-line error naming the value.  Without a
    method: ``aim`` for the central model, else ``local_default`` (``release``: ``auto``)."""
    if model is not None and model not in MODELS:
        raise DPMarginalsError(f"model must be 'local' or 'central', got {model!r}")
    if method is None:
        method = "aim" if model == "central" else local_default
    name = method.lower().replace("-", "_")
    central = name in CENTRAL_METHODS
    if model == "central" and not central:
        raise DPMarginalsError(
            f"method {method!r} is a local-DP method; the central model takes "
            f"{', '.join(sorted(CENTRAL_METHODS))}")
    if model == "local" and central:
        raise DPMarginalsError(f"method {method!r} is a central-DP method (a curator holds "
                               "the data); use model 'central' or a local method")
    if name in APPROXIMATE_METHODS and delta is None:
        raise DPMarginalsError(f"method {method!r} is (epsilon, delta)-DP: give a delta "
                               "(--delta), well below 1/n, e.g. 1e-9")
    if name not in APPROXIMATE_METHODS and delta is not None:
        raise DPMarginalsError(f"delta {delta!r} does not apply: method {method!r} is pure "
                               "epsilon-DP (aim, mst and residual take a delta)")
    return name, central


#: Options that set one method's plan or inference: ``auto`` picks the method, so they are
#: refused with it (name the method instead).
_METHOD_OPTIONS = ("theta", "m", "l", "oracle", "inference", "postprocess")


def _check_auto_params(params: Mapping[str, Any]) -> None:
    given = [key for key in _METHOD_OPTIONS if key in params]
    if given:
        raise DPMarginalsError(
            f"{', '.join(given)} set{'s' if len(given) == 1 else ''} one method's plan or "
            "inference, but the method is auto (chosen from the domain, n, epsilon and k): "
            "name the method (--method calm, calm-pgm or adaptive)")


def _check_delta(delta: float, n: int) -> None:
    """A delta at or above 1/n permits publishing a whole record: refused."""
    check_delta(delta)
    if delta * n >= 1:
        raise DPMarginalsError(
            f"delta {delta:g} is not below 1/n = {1 / max(n, 1):.3g} ({n:,} records): such a "
            "delta permits publishing whole records; use one well below 1/n, e.g. 1e-9")


def _check_size(algo: Any, data: Dataset) -> None:
    """Refuse, before any work, a domain whose marginals no release can hold (and warn,
    from the same plan, when its groups leave attributes out)."""
    for a, size in zip(data.domain.attributes, data.domain.sizes, strict=True):
        if size > MAX_GROUP_CELLS:
            raise DPMarginalsError(f"attribute {a!r} has {size:,} values; a release handles "
                                   f"at most {MAX_GROUP_CELLS:,} per marginal: bin it")
    plan = algo.plan(data.domain, data.n)
    if isinstance(plan, Plan) and plan.groups:  # a local plan
        warn_uncovered(plan)
    if hasattr(algo, "largest_marginal"):  # a central method (its plan has no groups)
        widest = algo.largest_marginal(data.domain)
        cells = data.domain.project(widest).cells()
        if cells > MAX_GROUP_CELLS:
            raise DPMarginalsError(
                f"the marginal over {sorted(widest)} has {cells:,} cells; a release handles "
                f"at most {MAX_GROUP_CELLS:,}: bin the attributes or lower --k")
    for group in plan.groups:
        if group.cells > MAX_GROUP_CELLS:
            raise DPMarginalsError(
                f"the marginal over {list(group.attributes)} has {group.cells:,} cells; a "
                f"release handles at most {MAX_GROUP_CELLS:,}: choose a smaller --l or bin "
                "the attributes")


def _dataset(data: pd.DataFrame | Dataset | str | Path,
             domain: Domain | Mapping[str, Any] | str | Path | None,
             domain_from_data: bool, extra_columns: str) -> Dataset:
    if isinstance(data, Dataset):
        if domain is not None:
            raise DPMarginalsError("a Dataset carries its domain; pass domain=None")
        return data
    if domain is None and not domain_from_data:
        raise DPMarginalsError(
            "release needs the public domain (--domain FILE / domain=): each attribute's "
            "values, declared, not read off the private data; domain_from_data=True "
            "(--domain-from-data) reads it off the data and publishes it")
    if domain is not None and domain_from_data:
        raise DPMarginalsError("give either a domain or domain_from_data=True, not both")
    if domain is not None and not isinstance(domain, Domain | Mapping | str | Path):
        raise DPMarginalsError(f"domain must be a Domain, a dict ({{'sex': ['f', 'm'], ...}}) "
                               f"or a domain JSON file's path, got {type(domain).__name__}")
    with warnings.catch_warnings():
        warnings.simplefilter("always", PrivacyLeakWarning)
        if isinstance(data, pd.DataFrame):
            return Dataset.from_frame(data, domain, extra_columns=extra_columns)
        if isinstance(data, str | Path):
            return Dataset.from_file(data, domain, extra_columns=extra_columns)
    raise DPMarginalsError(f"data must be a DataFrame, a file path or a Dataset, "
                           f"got {type(data).__name__}")


def load_release(path: str | Path) -> Any:
    """Any release: a synopsis (local or central, :func:`load_synopsis`), or a central k-tuple
    release (``dpmarginals central --out``, a
    :class:`~dpmarginals.central.result.DPMarginalsResult`: ``tuple_counts``, ``count``);
    warns if the file is not private."""
    body = read_json(path)
    if isinstance(body, dict) and body.get("format") == SYNOPSIS_FORMAT:
        return load_synopsis(path)
    from .central.result import RELEASE_FORMAT, DPMarginalsResult

    if not isinstance(body, dict) or body.get("format") != RELEASE_FORMAT:
        raise DPMarginalsError(f"{str(path)!r} is not a dpmarginals release or synopsis")
    try:
        result = DPMarginalsResult.from_file_body(body, str(path))
    except DPMarginalsError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise DPMarginalsError(f"malformed k-tuple release {str(path)!r}: {exc!r}") from None
    warn_if_not_private(result.provenance, str(path))
    return result
