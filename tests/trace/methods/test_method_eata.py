"""EATA: its Fisher estimate against a separate backward-pass computation, its regulariser
against autograd and its closed-form gradient, its sample selection against the thresholds,
its source samples, and the conformance kit."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tempora_trace.methods import MethodContext, MethodError, get_method
from tempora_trace.methods.testing import assert_conforms, demo_batches, demo_model, demo_source_images

N_SOURCE, BATCH = 48, 16


def _context(source=True) -> MethodContext:
    return MethodContext(
        num_classes=10,
        dataset_family="cifar",
        batch_size=BATCH,
        model_name="demo-resnet",
        source_images=demo_source_images(N_SOURCE) if source else None,
    )


def _eata(**params):
    torch.manual_seed(0)
    return get_method("eata")(demo_model("bn"), _context(), **params)


def test_defaults_follow_the_published_settings() -> None:
    cifar = get_method("eata").all_params(_context())
    imagenet = get_method("eata").all_params(MethodContext(num_classes=1000))
    assert (cifar["fisher_alpha"], cifar["fisher_size"], cifar["d_margin"]) == (1.0, 2000, 0.4)
    assert (imagenet["fisher_alpha"], imagenet["fisher_size"], imagenet["d_margin"]) == (2000.0, 2000, 0.05)
    assert imagenet["e_margin"] == pytest.approx(0.4 * math.log(1000))


def test_fisher_matches_squared_batch_gradients_by_backward() -> None:
    """Independent route: a fresh model, BN on batch statistics, ``loss.backward()`` per batch
    on the norm-layer affine parameters, squared and averaged over batches."""
    method = _eata(fisher_size=40)  # 40 of 48: batches of 16, 16 and 8
    assert method.fisher_samples == 40
    model = demo_model("bn")
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.train()
            m.track_running_stats = False
    model.requires_grad_(False)
    named = {n: p for n, p in model.named_parameters() if n in dict(method.adapted)}
    for p in named.values():
        p.requires_grad_(True)
    images = next(iter(demo_source_images(N_SOURCE)(40, 40)))
    sums = {n: torch.zeros_like(p) for n, p in named.items()}
    batches = images.split(BATCH)
    for x in batches:
        out = model(x)
        F.cross_entropy(out, out.argmax(1)).backward()
        for n, p in named.items():
            sums[n] += p.grad**2
            p.grad = None
    for (name, _), fisher in zip(method.adapted, method.fisher):
        torch.testing.assert_close(fisher, sums[name] / len(batches), rtol=1e-4, atol=1e-12)
    assert any(f.abs().sum() > 0 for f in method.fisher)


def test_fisher_estimate_leaves_the_bn_buffers_alone() -> None:
    method = _eata()
    for m in method.bn_layers:
        assert torch.count_nonzero(m.running_mean) == 0 and int(m.num_batches_tracked) == 0


def test_penalty_value_and_gradient_against_autograd() -> None:
    method = _eata(fisher_alpha=7.5)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _, p in method.adapted:
            p.add_(0.1 * torch.randn(p.shape, generator=gen))
    penalty = method.fisher_penalty()
    want = 7.5 * sum(float((f * (p.detach() - a) ** 2).sum()) for f, (_, p), a in zip(method.fisher, method.adapted, method.anchors))
    assert float(penalty.detach()) == pytest.approx(want, rel=1e-5)
    params = [p for _, p in method.adapted]
    grads = torch.autograd.grad(penalty, params)
    for g, f, p, a in zip(grads, method.fisher, params, method.anchors):
        torch.testing.assert_close(g, 2 * 7.5 * f * (p.detach() - a), rtol=1e-5, atol=1e-12)


def test_the_step_adds_the_penalty_gradient_to_eta() -> None:
    """EATA and ETA from one state see the same batches; the first step is identical (θ = θ⁰),
    and on the second EATA's parameters differ from ETA's by exactly −lr·∇penalty(θ₁)."""
    opts = {"lr": 0.05, "e_margin": 2.0, "d_margin": 1.0}
    eata = _eata(fisher_alpha=5e6, **opts)
    torch.manual_seed(0)
    eta = get_method("eta")(demo_model("bn"), _context(), **opts)
    xs = demo_batches(2, BATCH, severity=1)
    for i, x in enumerate(xs):
        if i == 1:
            theta1 = [p.detach().clone() for _, p in eata.adapted]
            expected = [-opts["lr"] * 2 * 5e6 * f * (t - a) for f, t, a in zip(eata.fisher, theta1, eata.anchors)]
        eata.predict(x)
        eata.adapt()
        eta.predict(x)
        eta.adapt()
        assert eata.last_updated and eta.last_updated
        if i == 0:
            for (_, p), (_, q) in zip(eata.adapted, eta.adapted):
                torch.testing.assert_close(p, q, rtol=0, atol=0)
    moved = 0.0
    for (_, p), (_, q), e in zip(eata.adapted, eta.adapted, expected):
        torch.testing.assert_close(p.detach() - q.detach(), e, rtol=1e-3, atol=1e-6)  # float32 rounding of θ ≈ 1
        moved = max(moved, float(e.abs().max()))
    assert moved > 1e-4, moved  # the regulariser's pull is well above rounding


def test_selection_follows_the_thresholds() -> None:
    """The samples kept per batch are those with entropy < e_margin and, after the first batch
    with reliable samples, |cos(p, moving average)| < d_margin, computed here from the returned
    logits with the moving average kept by this test."""
    method = _eata(d_margin=0.9)
    e_margin, d_margin = method.params["e_margin"], 0.9
    average = None
    kept_any = False
    for x in demo_batches(6, BATCH, severity=1):
        logits = method.predict(x)
        method.adapt()
        probs = logits.softmax(1)
        entropy = -(probs * logits.log_softmax(1)).sum(1)
        reliable = probs[entropy < e_margin]
        if average is not None and len(reliable):
            cos = F.cosine_similarity(average.unsqueeze(0), reliable, dim=1)
            novel = reliable[cos.abs() < d_margin]
        else:
            novel = reliable
        assert method.last_kept == (len(reliable), len(novel))
        assert method.last_updated is (len(novel) > 0)
        if len(novel):
            kept_any = True
            average = novel.mean(0) if average is None else 0.9 * average + 0.1 * novel.mean(0)
            torch.testing.assert_close(method.mean_probs, average, rtol=1e-5, atol=1e-7)
    assert kept_any


def test_no_source_images_is_refused_unless_the_regulariser_is_off() -> None:
    with pytest.raises(MethodError, match="fisher_alpha=0") as err:
        get_method("eata")(demo_model("bn"), _context(source=False))
    assert "\n" not in str(err.value)
    method = get_method("eata")(demo_model("bn"), _context(source=False), fisher_alpha=0.0)
    assert method.fisher_penalty() is None


def test_runner_source_images_are_the_clean_split_in_a_fixed_order() -> None:
    import numpy as np

    from tempora_trace.data.cifar import ArraySource
    from tempora_trace.data.streams import Domain
    from tempora_trace.run_support import SOURCE_SAMPLE_SEED, clean_images

    images = np.random.default_rng(5).integers(0, 256, (30, 8, 8, 3), dtype=np.uint8)
    opened = []

    class Dataset:
        def open(self, domain, severity, root):
            opened.append((domain, severity, root))
            return Domain(domain, severity, ArraySource(images, np.zeros(30, dtype=np.int64)))

    first = list(clean_images(Dataset(), None, 10, 4))
    assert [b.shape[0] for b in first] == [4, 4, 2] and opened == [("clean", None, None)]
    order = np.random.default_rng(SOURCE_SAMPLE_SEED).permutation(30)[:10]
    want = torch.from_numpy(images[order]).permute(0, 3, 1, 2).float() / 255
    torch.testing.assert_close(torch.cat(first), want)
    torch.testing.assert_close(torch.cat(list(clean_images(Dataset(), None, 10, 3))), want)
    assert sum(b.shape[0] for b in clean_images(Dataset(), None, 100, 64)) == 30  # fewer where the split is smaller


def test_eata_conforms() -> None:
    assert_conforms("eata")
