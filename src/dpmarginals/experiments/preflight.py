"""What an experiment needs, checked before any of it runs (issue #33, point 6).

``dpmarginals experiment`` used to run the whole grid and only then fail on a missing
extra (matplotlib draws the figure last), or run one data set's tasks and fail on the next
data set's missing file.  :func:`check_ready` looks first: every optional module the
experiment imports (one line naming the extra to install), and every file of every data
set its grid reads (found, or downloaded when downloads are allowed; otherwise one line
naming the file and ``$DPMARGINALS_DATA``).

>>> needs("calm-pgm")
(('matplotlib', 'plots'), ('mbi', 'pgm'), ('jax', 'pgm'))
"""

from __future__ import annotations

from ..core.errors import DataNotFoundError, DPMarginalsError
from ..core.extras import MissingExtraError, message, require
from .runner import Experiment

__all__ = ["NEEDS", "check_ready", "data_sets", "needs"]

#: Optional modules (import name, extra) an experiment's tasks import, beyond matplotlib,
#: which draws every experiment's figures.
NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "calm-fig6": (("sklearn", "experiments"),),  # SVMs on synthetic data
    "calm-pgm": (("mbi", "pgm"), ("jax", "pgm")),
    "central-tables": (("opendp", "tables"), ("polars", "tables"), ("mbi", "tables"),
                       ("jax", "tables")),
    "heldout": (("mbi", "pgm"), ("jax", "pgm")),  # calm-pgm beside adaptive and auto
    "heldout-latent": (("mbi", "pgm"), ("jax", "pgm")),
}

#: The grids' data set names that are not registry names: what they load.
_LOADS = {"br2000-3": "br2000", "zipf": None, "bn": None, "lc": None}  # synthetic, no file


def needs(name: str) -> tuple[tuple[str, str], ...]:
    """(module, extra) pairs the experiment ``name`` imports."""
    return (("matplotlib", "plots"), *NEEDS.get(name, ()))


def data_sets(experiment: Experiment, quick: bool) -> list[str]:
    """The registry names of the data sets the experiment's grid reads, in first use order."""
    out: list[str] = []
    for task in experiment.tasks(quick):
        name = task.get("dataset")
        if not isinstance(name, str):
            continue
        name = _LOADS.get(name, name)
        if name is not None and name not in out:
            out.append(name)
    return out


def check_ready(experiment: Experiment, quick: bool) -> None:
    """Refuse, before anything runs, an experiment whose extras or data files are missing
    (one line each: :class:`~dpmarginals.core.extras.MissingExtraError`,
    :class:`~dpmarginals.core.errors.DataNotFoundError`).  Missing files are downloaded
    first when downloads are allowed (``$DPMARGINALS_OFFLINE`` unset)."""
    from ..datasets import get_info
    from ..datasets.files import ensure_file
    from ..inference.pgm import require_mbi

    for module, extra in needs(experiment.name):
        what = f"experiment {experiment.name!r}"
        try:
            if module == "mbi":  # 64-bit JAX first, mbi's import advice silenced
                require_mbi()
            else:
                require(module, extra=extra, what=what)
        except MissingExtraError as exc:  # named for this experiment's extra
            raise MissingExtraError(f"{message(extra, what, exc.module)} (nothing was run)",
                                    extra, exc.module) from None
    for name in data_sets(experiment, quick):
        try:
            info = get_info(name)
        except DPMarginalsError:
            continue  # not a registered data set: the experiment makes it
        for file in info.files:
            try:
                ensure_file(file, dataset=info.name)
            except DataNotFoundError as exc:
                raise DataNotFoundError(f"experiment {experiment.name!r} (nothing was run): "
                                        f"{exc}") from None
