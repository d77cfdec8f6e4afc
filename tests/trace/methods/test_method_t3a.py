"""T3A against a direct NumPy computation of its support set and prototype classifier, its
``updated`` flag against what entered the support set, and the conformance kit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

from tempora_trace.methods import MethodContext, MethodError, get_method
from tempora_trace.methods.testing import assert_conforms

D, C = 6, 3


class FeatureModel(nn.Module):
    """Its input *is* the feature vector, so the test chooses the features directly."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(3)
        self.fc = nn.Linear(D, C)
        with torch.no_grad():
            self.fc.weight.copy_(torch.randn(C, D, generator=gen) * 2)
            self.fc.bias.copy_(torch.randn(C, generator=gen) * 0.1)

    def features_and_classifier(self):
        return nn.Identity(), self.fc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def _entropy(logits: np.ndarray) -> np.ndarray:
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    return -(p * np.log(p)).sum(1)


class Oracle:
    """T3A written out in NumPy, float64, from the paper's description."""

    def __init__(self, w: np.ndarray, b: np.ndarray, k: int):
        self.w, self.b, self.k = w, b, k
        logits = w @ w.T + b
        self.s, self.y, self.h = w.copy(), logits.argmax(1), _entropy(logits)

    def step(self, z: np.ndarray) -> tuple[np.ndarray, bool]:
        logits = z @ self.w.T + self.b
        s = np.concatenate([self.s, z])
        y = np.concatenate([self.y, logits.argmax(1)])
        h = np.concatenate([self.h, _entropy(logits)])
        kept = []
        for c in range(C):
            idx = np.flatnonzero(y == c)
            idx = idx[np.argsort(h[idx], kind="stable")]
            kept.extend(idx if self.k < 0 else idx[: self.k])
        new = any(i >= len(self.s) for i in kept)
        self.s, self.y, self.h = s[kept], y[kept], h[kept]
        return self.predict(z), new

    def predict(self, z: np.ndarray) -> np.ndarray:
        unit = self.s / np.linalg.norm(self.s, axis=1, keepdims=True)
        proto = np.stack([unit[self.y == c].sum(0) for c in range(C)], axis=1)
        norms = np.linalg.norm(proto, axis=0)
        proto = proto / np.where(norms > 0, norms, 1.0)
        return z @ proto


def _method(k: int):
    context = MethodContext(num_classes=C, dataset_family="cifar", batch_size=8)
    return get_method("t3a")(FeatureModel(), context, filter_K=k)


@pytest.mark.parametrize("k", [1, 2, 100, -1])
def test_support_set_classifier_matches_a_direct_computation(k: int) -> None:
    method = _method(k)
    w = method.head.weight.detach().double().numpy()
    b = method.head.bias.detach().double().numpy()
    oracle = Oracle(w, b, k)
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        z = torch.randn(8, D, generator=gen)
        got = method.predict(z)
        method.adapt()
        want, new = oracle.step(z.double().numpy())
        np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-5, atol=1e-5)
        assert method.last_updated is new
        assert sorted(method.labels.tolist()) == sorted(oracle.y.tolist())
    if k > 0:
        assert all((method.labels == c).sum() <= k for c in range(C))


def test_the_support_set_starts_from_the_classifier_rows_and_reset_returns_there() -> None:
    method = _method(2)
    w = method.head.weight.detach().clone()
    torch.testing.assert_close(method.supports, w)
    torch.testing.assert_close(method.labels, (w @ w.T + method.head.bias).argmax(1))
    method.predict(torch.randn(8, D))
    method.reset()
    torch.testing.assert_close(method.supports, w)


def test_a_batch_that_enters_nothing_is_not_an_update() -> None:
    """Zero features give the uniform-ish bias-only prediction, the highest entropy there is
    here: with filter_K = 1 none of them displaces a class's best support."""
    model = FeatureModel()
    with torch.no_grad():
        model.fc.bias.zero_()
    method = get_method("t3a")(model, MethodContext(num_classes=C), filter_K=1)
    before = method.extra_state()
    method.predict(torch.zeros(4, D))
    assert method.last_updated is False
    for key, value in before.items():
        torch.testing.assert_close(method.extra_state()[key], value)
    method.predict(method.head.weight.detach()[:1] * 3)  # a class row, scaled: more confident than the row itself
    assert method.last_updated is True


def test_frozen_predicts_with_the_set_so_far_and_adds_nothing() -> None:
    method = _method(2)
    method.predict(torch.randn(8, D))
    oracle_state = method.extra_state()
    method.freeze()
    z = torch.randn(5, D)
    out = method.predict(z)
    assert method.last_updated is False
    torch.testing.assert_close(method.supports, oracle_state["supports"])
    unit = torch.nn.functional.normalize(oracle_state["supports"], dim=1)
    proto = torch.nn.functional.normalize(unit.T @ torch.nn.functional.one_hot(oracle_state["labels"], C).float(), dim=0)
    torch.testing.assert_close(out, z @ proto)


@pytest.mark.parametrize("bad", [0, -2])
def test_filter_k_out_of_range_is_refused(bad: int) -> None:
    with pytest.raises(MethodError, match="filter_K"):
        _method(bad)


def test_a_model_without_a_head_is_refused_in_one_line() -> None:
    class NoHead(nn.Module):
        def forward(self, x):
            return x.flatten(1)[:, :C].log_softmax(1)

    with pytest.raises(MethodError, match="t3a.*features and classifier") as err:
        get_method("t3a")(NoHead(), MethodContext(num_classes=C))
    assert "\n" not in str(err.value)


def test_t3a_conforms() -> None:
    assert_conforms("t3a")
