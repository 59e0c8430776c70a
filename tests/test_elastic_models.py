"""Models (Numba kernels) against finite differences and numpy; datasets and shards."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from hpcbsp.elastic.data import DatasetUnavailable, MinibatchGradient, load_dataset, load_digits, make_generated, shard
from hpcbsp.elastic.models import MLP, SoftmaxRegression, make_model

pytestmark = pytest.mark.serial_only


def _numpy_softmax_loss(w: np.ndarray, X: np.ndarray, y: np.ndarray, k: int) -> float:
    d = X.shape[1]
    logits = X @ w[:d * k].reshape(d, k) + w[d * k:]
    logits -= logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(y)), y].mean())


def _finite_difference(loss, w: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(w)
    for j in range(w.size):
        e = np.zeros_like(w)
        e[j] = eps
        g[j] = (loss(w + e) - loss(w - e)) / (2 * eps)
    return g


@pytest.mark.parametrize("model", [SoftmaxRegression(5, 3), MLP(5, 4, 3)], ids=["softmax", "mlp"])
def test_gradient_matches_finite_differences(model) -> None:
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(9, 5)), rng.integers(0, 3, size=9)
    w = model.init(2) + rng.normal(0, 0.3, model.n_params)
    g, loss = model.grad(w, X, y)
    fd = _finite_difference(lambda v: model.grad(v, X, y)[1], w)
    np.testing.assert_allclose(g, fd, atol=1e-7)
    assert g.shape == (model.n_params,)


def test_softmax_loss_and_accuracy_match_numpy() -> None:
    rng = np.random.default_rng(2)
    model = SoftmaxRegression(6, 4)
    X, y = rng.normal(size=(30, 6)), rng.integers(0, 4, size=30)
    w = rng.normal(size=model.n_params)
    _, loss = model.grad(w, X, y)
    assert loss == pytest.approx(_numpy_softmax_loss(w, X, y, 4), rel=1e-12)
    acc, eval_loss = model.evaluate(w, X, y)
    pred = np.argmax(X @ w[:24].reshape(6, 4) + w[24:], axis=1)
    assert acc == pytest.approx(np.mean(pred == y))
    assert eval_loss == pytest.approx(loss, rel=1e-12)


def test_softmax_gradient_is_the_kernels_with_an_intercept_and_checks_its_input() -> None:
    from hpcbsp.kernels import reference

    rng = np.random.default_rng(8)
    model = SoftmaxRegression(5, 3)
    w = rng.standard_normal(model.n_params)
    X, y = rng.standard_normal((40, 5)), rng.integers(0, 3, 40)
    g, loss = model.grad(w, X, y)
    ref_loss, ref_g = reference.softmax_loss_grad(w.reshape(6, 3), X, y, intercept=True)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    np.testing.assert_allclose(g, ref_g.reshape(-1), rtol=1e-10, atol=1e-13)
    g_f, _ = model.grad(w, np.asfortranarray(X), y.astype(np.int32))  # converted, same result
    np.testing.assert_array_equal(g_f, g)
    for bad_X, bad_y in ((X[:, :4], y), (np.hstack([X, X]), y), (X, y[:-1]), (X, y + 1)):
        with pytest.raises(ValueError, match="do not fit"):
            model.grad(w, bad_X, bad_y)


def test_mlp_parameter_count_and_symmetry_breaking_init() -> None:
    m = MLP(64, 32, 10)
    assert m.n_params == 64 * 32 + 32 + 32 * 10 + 10
    w = m.init(0)
    assert np.unique(w[:64 * 32]).size > 1000 and np.all(w[64 * 32:64 * 32 + 32] == 0)
    with pytest.raises(ValueError, match="unknown model"):
        make_model("lstm", 3, 2)


def test_sgd_on_generated_data_learns() -> None:
    data = make_generated(n_samples=600, n_features=8, n_classes=3, seed=4)
    model = make_model("softmax", data.n_features, data.n_classes)
    grad = MinibatchGradient(model, data.X_train, data.y_train, batch=32, seed=0)
    w = model.init(0)
    before, _ = model.evaluate(w, data.X_test, data.y_test)
    for _ in range(150):
        w -= 0.1 * grad(w)
    after, _ = model.evaluate(w, data.X_test, data.y_test)
    assert before < 0.5 < 0.8 < after


def test_shards_partition_the_samples() -> None:
    parts = shard(103, 4, seed=1)
    assert [len(p) for p in parts] == [26, 26, 26, 25]
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(103))


def test_datasets_are_standardised_and_split_reproducibly() -> None:
    a, b = make_generated(seed=3), make_generated(seed=3)
    np.testing.assert_array_equal(a.X_test, b.X_test)
    np.testing.assert_allclose(a.X_train.mean(axis=0), 0.0, atol=1e-12)
    assert len(a.y_train) + len(a.y_test) == 2000
    with pytest.raises(ValueError, match="unknown dataset"):
        load_dataset("mnist")


def test_digits_loads_when_scikit_learn_is_installed() -> None:
    pytest.importorskip("sklearn", reason="the digits dataset is the optional extra 'digits'")
    d = load_digits()
    assert d.n_features == 64 and d.n_classes == 10
    assert len(d.y_train) + len(d.y_test) == 1797


def test_samples_sets_the_size_of_every_dataset() -> None:
    # (train.py --n): train and test together, 20 % held out; digits: a seeded subset of its images
    for name in ("generated", "teacher"):
        d = load_dataset(name, 5, teacher_dim=8, samples=250)
        assert (len(d.y_train), len(d.y_test)) == (200, 50)
    assert len(load_dataset("generated", 5).y_test) == 400  # the default: 2,000
    pytest.importorskip("sklearn", reason="the digits dataset is the optional extra 'digits'")
    a, b = load_dataset("digits", 5, samples=300), load_dataset("digits", 5, samples=300)
    assert (len(a.y_train), len(a.y_test)) == (240, 60)
    np.testing.assert_array_equal(a.X_train, b.X_train)
    assert not np.array_equal(a.y_train, load_dataset("digits", 6, samples=300).y_train)  # another seed, another subset
    with pytest.raises(ValueError, match="has 1,797 images: cannot take 1,798"):
        load_digits(samples=1798)


def test_digits_without_scikit_learn_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(DatasetUnavailable, match=r"needs scikit-learn.*hpcbsp\[digits\].*--dataset generated"):
        load_digits()
