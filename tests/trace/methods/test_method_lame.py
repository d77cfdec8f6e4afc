"""LAME: refined probabilities are distributions pulled towards the neighbours' consensus."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from helpers.methods import (
    batches,
    check_frozen_changes_nothing,
    check_gradient_free,
    check_hparams,
    check_reset_bit_identical,
    check_snapshot_restore,
    context,
    tiny_model,
)
from tempora_trace.methods import get_method


def make(model=None, **params):
    return get_method("lame")(model if model is not None else tiny_model(), context(), **params)


def linear_probe(weight: torch.Tensor) -> nn.Module:
    """A "network" whose penultimate features are its input: lets a test place points in
    feature space directly."""
    head = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    with torch.no_grad():
        head.weight.copy_(weight)
    return nn.Sequential(nn.Flatten(), head)


def numpy_lame(logits: np.ndarray, feats: np.ndarray, k: int, steps: int, tol: float) -> np.ndarray:
    """Plain-numpy oracle of the paper's algorithm: kNN graph on normalised features, then the
    fixed-point iteration Y ← softmax(log p + W Y) with the relative-energy stopping rule."""
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    unary = -np.log(p + 1e-10)
    f = feats / np.linalg.norm(feats, axis=1, keepdims=True)
    n = len(f)
    w = np.zeros((n, n))
    for i in range(n):
        d = [(np.linalg.norm(f[i] - f[j]), j) for j in range(n) if j != i]
        for _, j in sorted(d)[:k]:
            w[i, j] = 1.0

    def softmax(z):
        z = z - z.max(1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(1, keepdims=True)

    y = softmax(-unary)
    old = np.inf
    for i in range(steps):
        pair = w @ y
        y = softmax(pair - unary)
        e = (unary * y - pair * y + y * np.log(np.clip(y, 1e-20, None))).sum()
        if i > 1 and abs(e - old) <= tol * abs(old):
            break
        old = e
    return y


def two_clusters():
    """Two tight clusters in feature space (near e1 and e2). Point 0 sits in cluster A, but a
    third feature the head weighs heavily makes the model alone predict class 1 for it."""
    g = torch.Generator().manual_seed(0)
    a = torch.tensor([1.0, 0.0, 0.0]) + 0.05 * torch.randn(6, 3, generator=g).abs()
    b = torch.tensor([0.0, 1.0, 0.0]) + 0.05 * torch.randn(6, 3, generator=g).abs()
    a[:, 2] = 0.0
    b[:, 2] = 0.0
    a[0] = torch.tensor([1.0, 0.0, 0.3])
    weight = torch.tensor([[2.0, 0.0, 0.0], [0.0, 2.0, 10.0]])
    return linear_probe(weight), torch.cat([a, b])


def test_refined_probabilities_are_distributions_that_follow_neighbours():
    model, x = two_clusters()
    method = make(model)
    out = method.predict(x)
    probs = out.exp()
    assert torch.all(probs >= 0)
    torch.testing.assert_close(probs.sum(1), torch.ones(len(x)), atol=1e-5, rtol=0)
    softmax = model(x).softmax(1)
    # point 0 alone was predicted class 1; its 5 neighbours are all cluster A: LAME flips it
    assert softmax[0].argmax() == 1 and probs[0].argmax() == 0
    # neighbours that agree with each other keep their class and become more confident
    assert torch.equal(probs[1:].argmax(1), softmax[1:].argmax(1))
    assert torch.all(probs[1:].max(1).values > softmax[1:].max(1).values)
    assert 1 <= method.last_iterations <= 100


def test_matches_plain_numpy_oracle_on_a_real_network():
    model = tiny_model()
    x = batches(1, batch_size=16)[0]
    feats = []
    h = model.fc.register_forward_hook(lambda m, inp, out: feats.append(inp[0]))
    with torch.no_grad():
        logits = model(x)
    h.remove()
    expected = numpy_lame(logits.double().numpy(), feats[0].double().numpy(), 5, 100, 1e-8)
    out = make(model).predict(x).exp()
    np.testing.assert_allclose(out.numpy(), expected, atol=1e-4)


def test_max_steps_bounds_the_iterations():
    method = make(max_steps=2)
    method.predict(batches(1)[0])
    assert method.last_iterations == 2


def test_single_sample_batch_is_plain_softmax():
    model = tiny_model()
    x = batches(1, batch_size=1)[0]
    with torch.no_grad():
        expected = model(x).softmax(1)
    torch.testing.assert_close(make(model).predict(x).exp(), expected, atol=1e-5, rtol=0)


def test_contract():
    xs = batches(3)
    check_gradient_free(make(), xs)
    check_reset_bit_identical(make(), xs)
    check_snapshot_restore(make(), xs + xs[:1])
    model = tiny_model()
    frozen = check_frozen_changes_nothing(make(model), xs[:1], warmup=1)
    with torch.no_grad():
        assert torch.equal(frozen[0], model(xs[0]))  # frozen = unrefined source model
    assert check_hparams(make(), ("knn", "max_steps", "tol"))["knn"] == 5
