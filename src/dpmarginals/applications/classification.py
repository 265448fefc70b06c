"""CALM §5.4 / Figure 6: a linear SVM trained on records synthesized from a private marginal.

The aggregator releases the (k = |features| + 1)-way marginal of the features and the
label, samples a synthetic training set from it (:func:`dpmarginals.synopsis.synthetic.
sample_marginal`), and trains a linear SVM on it; the misclassification rate is measured
on held-out real records.  Baselines: *NoNoise* (the same SVM trained on the real training
records) and *Majority* (always predict the majority label of the training records).

Records are one-hot encoded.  Since every feature is categorical with few values, a
synthetic training set is fully described by how many records fall in each cell of the
marginal; the SVM is trained on the distinct cells with those counts as sample weights,
which is the same optimisation problem as training on the records one by one (and fast
for the 2^20 synthetic records of Figure 6).  The SVM is scikit-learn's ``LinearSVC``
(L2-regularised squared hinge loss, ``C = 1``; solved in the primal, deterministic).
scikit-learn is an optional dependency (``pip install dpmarginals[experiments]``).

>>> import numpy as np
>>> from dpmarginals.core.dataset import Dataset
>>> from dpmarginals.core.domain import Domain
>>> gen = np.random.default_rng(0)
>>> x = gen.integers(0, 2, size=(4000, 2))
>>> y = (x[:, 0] ^ (gen.random(4000) < 0.1)).astype(int)
>>> data = Dataset(np.column_stack([x, y]), Domain(("f", "g", "label"), (2, 2, 2)))
>>> train, test = data.take(np.arange(3000)), data.take(np.arange(3000, 4000))
>>> err = misclassification(train.marginal(["f", "g", "label"]), "label", test, n=3000, rng=1)
>>> 0.05 < err < 0.15, 0.05 < majority_error(train, "label", test) < 0.95
(True, True)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..core.dataset import Dataset
from ..core.errors import DPMarginalsError
from ..core.randomness import RNGLike, simulation_rng
from ..core.table import MarginalTable
from ..inference import project_to_simplex

__all__ = ["best_possible_error", "majority_error", "misclassification", "nonprivate_error",
           "svm_error"]


def _sklearn_svc() -> type:
    try:
        from sklearn.svm import LinearSVC
    except ImportError:  # pragma: no cover - depends on the installation
        raise DPMarginalsError(
            "the classification experiment needs scikit-learn: "
            "pip install 'dpmarginals[experiments]' (or pip install scikit-learn)") from None
    return LinearSVC


def _one_hot(codes: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    cols = [np.eye(s)[codes[:, j]] for j, s in enumerate(sizes)]
    return np.hstack(cols) if cols else np.zeros((codes.shape[0], 0))


def svm_error(feature_cells: np.ndarray, labels: np.ndarray, weights: np.ndarray,
              sizes: Sequence[int], test_codes: np.ndarray, test_labels: np.ndarray) -> float:
    """Train on weighted distinct records; misclassification rate on the test records.

    ``feature_cells`` (rows of feature codes), ``labels`` and ``weights`` describe the
    training set (weights = record counts); a training set with one label predicts it.
    """
    keep = weights > 0
    feature_cells, labels, weights = feature_cells[keep], labels[keep], weights[keep]
    if len(labels) == 0:
        raise DPMarginalsError("the training set is empty")
    classes = np.unique(labels)
    if len(classes) == 1:
        return float(np.mean(test_labels != classes[0]))
    svc = _sklearn_svc()(C=1.0, dual=False, max_iter=5000, tol=1e-6)
    svc.fit(_one_hot(feature_cells, sizes), labels, sample_weight=weights)
    # predict each distinct test configuration once
    uniq, inverse = np.unique(test_codes, axis=0, return_inverse=True)
    pred = svc.predict(_one_hot(uniq, sizes))[inverse.ravel()]
    return float(np.mean(pred != test_labels))


def _split(table_domain_attrs: Sequence[str], label: str) -> tuple[list[str], int]:
    attrs = list(table_domain_attrs)
    if label not in attrs:
        raise DPMarginalsError(f"the label {label!r} is not an attribute of the marginal "
                               f"{attrs}")
    features = [a for a in attrs if a != label]
    if not features:
        raise DPMarginalsError("the marginal has no feature besides the label")
    return features, attrs.index(label)


def misclassification(table: MarginalTable, label: str, test: Dataset, *, n: int,
                      rng: RNGLike = None) -> float:
    """Error on ``test`` of an SVM trained on ``n`` records synthesized from ``table``.

    ``table`` is the (private) marginal of the features and ``label``.
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise DPMarginalsError(f"n must be an integer >= 1, got {n!r}")
    _split(table.attributes, label)
    p = project_to_simplex(table.values)
    weights = simulation_rng(rng).multinomial(int(n), p.ravel() / p.sum()).astype(float)
    return _weighted_error(table, label, weights, test)


def _weighted_error(table: MarginalTable, label: str, weights: np.ndarray, test: Dataset
                    ) -> float:
    features, li = _split(table.attributes, label)
    p = table.values
    cells = np.column_stack(np.unravel_index(np.arange(p.size), p.shape))
    feat_idx = [i for i in range(cells.shape[1]) if i != li]
    sizes = [table.domain.size(a) for a in features]
    return svm_error(cells[:, feat_idx], cells[:, li], weights, sizes,
                     test.project(features).codes.astype(np.int64),
                     test.column(label).astype(np.int64))


def nonprivate_error(train: Dataset, features: Sequence[str], label: str, test: Dataset
                     ) -> float:
    """NoNoise: the same SVM trained on the real training records."""
    attrs = [*features, label]
    counts = train.counts(attrs).astype(float)
    return _weighted_error(train.marginal(attrs), label, counts.ravel(), test)


def majority_error(train: Dataset, label: str, test: Dataset) -> float:
    """Majority: always predict the most frequent training label."""
    counts = np.bincount(train.column(label), minlength=train.domain.size(label))
    return float(np.mean(test.column(label) != int(np.argmax(counts))))


def best_possible_error(train: Dataset, features: Sequence[str], label: str, test: Dataset
                        ) -> float:
    """The lowest error of any classifier on ``features``: each feature cell of ``test``
    gets the majority label of that cell in ``train`` (the overall majority if unseen)."""
    attrs = [*features, label]
    counts = train.counts(attrs).reshape(-1, train.domain.size(label))
    overall = int(np.argmax(counts.sum(axis=0)))
    best = np.where(counts.sum(axis=1) > 0, np.argmax(counts, axis=1), overall)
    cells = test.project(list(features)).cell_indices(list(features))
    return float(np.mean(best[cells] != test.column(label)))
