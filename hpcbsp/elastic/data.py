"""Training data: scikit-learn's bundled digits (optional extra ``digits``), generated clusters,
or a teacher-student task (random inputs labelled by a fixed random network, any size).

Both come standardised (train-set mean 0, std 1 per feature) and split into train and test sets
with a seeded permutation, so every MPI rank that loads them with the same seed holds the same
arrays and needs no communication to get its shard.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Dataset", "DatasetUnavailable", "DEFAULT_SAMPLES", "DIGITS_SAMPLES", "load_dataset", "load_digits",
           "make_generated", "make_teacher", "shard", "MinibatchGradient"]

DATASETS = ("digits", "generated", "teacher")


class DatasetUnavailable(RuntimeError):
    """The requested dataset cannot be loaded here (message says how to get it)."""


@dataclass(frozen=True)
class Dataset:
    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    n_classes: int

    @property
    def n_features(self) -> int:
        return self.X_train.shape[1]


def _split_standardise(name: str, X: np.ndarray, y: np.ndarray, n_classes: int,
                       test_fraction: float, seed: int) -> Dataset:
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = max(1, int(round(test_fraction * len(y))))
    test, train = order[:n_test], order[n_test:]
    mean = X[train].mean(axis=0)
    std = X[train].std(axis=0)
    std[std == 0] = 1.0  # constant pixels (digits' borders) stay 0 instead of dividing by 0
    Xs = np.ascontiguousarray((X - mean) / std)
    return Dataset(name, Xs[train], y[train].astype(np.int64), Xs[test], y[test].astype(np.int64), n_classes)


#: Images in scikit-learn's digits dataset.
DIGITS_SAMPLES = 1797


def load_digits(test_fraction: float = 0.2, seed: int = 0, samples: int | None = None) -> Dataset:
    """The 1,797 8x8 digit images bundled with scikit-learn (no download); ``samples``: a
    subset of that many images, drawn with ``seed`` (None: all)."""
    try:
        from sklearn.datasets import load_digits as _load
    except ImportError as exc:
        raise DatasetUnavailable(
            "the digits dataset needs scikit-learn, which is not installed: "
            "`pip install 'hpcbsp[digits]'`, or use --dataset generated") from exc
    bunch = _load()
    X, y = bunch.data.astype(np.float64), bunch.target
    if samples is not None:
        if not 1 <= samples <= len(y):
            raise ValueError(f"the digits dataset has {len(y):,} images: cannot take {samples:,} of them")
        keep = np.sort(np.random.default_rng([seed, 11]).permutation(len(y))[:samples])
        X, y = X[keep], y[keep]
    return _split_standardise("digits", X, y, 10, test_fraction, seed)


def make_generated(n_samples: int = 2000, n_features: int = 20, n_classes: int = 5,
                   separation: float = 1.5, test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """Gaussian clusters, one per class, with overlapping tails (not linearly separable)."""
    if n_samples < 2 * n_classes or n_features < 1 or n_classes < 2:
        raise ValueError("generated data needs n_classes >= 2, n_features >= 1, n_samples >= 2*n_classes")
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, separation, size=(n_classes, n_features))
    y = rng.integers(0, n_classes, size=n_samples)
    X = centres[y] + rng.normal(0.0, 1.0, size=(n_samples, n_features))
    return _split_standardise("generated", X, y, n_classes, test_fraction, seed)


def make_teacher(n_samples: int = 4000, n_features: int = 64, n_classes: int = 10,
                 teacher_hidden: int = 64, test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """Teacher-student data: standard-normal inputs labelled by a fixed random network.

    The teacher is ``n_features -> teacher_hidden (tanh) -> n_classes`` with Gaussian weights
    (variance 1/fan-in) drawn from ``seed``; a sample's label is the teacher's argmax.  Only
    the student's capacity and the optimisation limit the accuracy a student can reach (the
    labels are a deterministic function of the inputs).  Nothing is downloaded; any size.
    """
    if n_samples < 2 * n_classes or n_features < 1 or n_classes < 2 or teacher_hidden < 1:
        raise ValueError("teacher data needs n_classes >= 2, n_features >= 1, "
                         "n_samples >= 2*n_classes and a teacher with at least 1 hidden unit")
    rng = np.random.default_rng([seed, 7])
    W1 = rng.normal(0.0, 1.0 / np.sqrt(n_features), size=(n_features, teacher_hidden))
    W2 = rng.normal(0.0, 1.0 / np.sqrt(teacher_hidden), size=(teacher_hidden, n_classes))
    X = rng.normal(0.0, 1.0, size=(n_samples, n_features))
    y = np.argmax(np.tanh(X @ W1) @ W2, axis=1)
    return _split_standardise("teacher", X, y, n_classes, test_fraction, seed)


#: Samples of each dataset, train and test together, where ``load_dataset`` is given none.
DEFAULT_SAMPLES = {"digits": DIGITS_SAMPLES, "generated": 2000, "teacher": 4000}


def load_dataset(name: str, seed: int = 0, *, teacher_dim: int = 64,
                 samples: int | None = None) -> Dataset:
    """``"digits"``, ``"generated"`` or ``"teacher"`` (``teacher_dim`` inputs) with ``samples``
    samples, train and test together (None: :data:`DEFAULT_SAMPLES`; digits: at most its 1,797,
    a seeded subset when fewer)."""
    if name == "digits":
        return load_digits(seed=seed, samples=samples)
    n_samples = DEFAULT_SAMPLES.get(name, 0) if samples is None else samples
    if name == "generated":
        return make_generated(n_samples=n_samples, seed=seed)
    if name == "teacher":
        return make_teacher(n_samples=n_samples, n_features=teacher_dim, seed=seed)
    raise ValueError(f"unknown dataset {name!r}; choose from: {', '.join(DATASETS)}")


def shard(n_samples: int, n_workers: int, seed: int = 0) -> list[np.ndarray]:
    """Split ``range(n_samples)`` into ``n_workers`` disjoint, shuffled, near-equal shards."""
    order = np.random.default_rng(seed).permutation(n_samples)
    return [np.sort(part) for part in np.array_split(order, n_workers)]


class MinibatchGradient:
    """A worker's gradient source: random mini-batches from its own shard.

    Calling it with weights returns the gradient on the next mini-batch.
    """

    def __init__(self, model, X: np.ndarray, y: np.ndarray, batch: int, seed: int):
        if batch < 1:
            raise ValueError(f"batch size must be at least 1, got {batch}")
        self.model = model
        self.X = np.ascontiguousarray(X)
        self.y = np.ascontiguousarray(y)
        self.batch = min(batch, len(y))
        self.rng = np.random.default_rng(seed)  # its draws so far are its state

    def __call__(self, w: np.ndarray) -> np.ndarray:
        idx = self.rng.choice(len(self.y), size=self.batch, replace=False)
        g, _ = self.model.grad(w, self.X[idx], self.y[idx])
        return g
