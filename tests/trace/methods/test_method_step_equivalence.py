"""The optimised adapt steps compute exactly what their plain forms compute.

The methods gather filtered samples with one index instead of repeated boolean masks, run SGD,
SAM's perturbation and CMF's Kalman step as list-wide ``torch._foreach_*`` calls instead of
per-parameter Python loops, and keep auxiliary forwards off the BN buffers by switching tracking
off instead of zeroing the momentum and restoring the counter. The oracles below are those
plain forms, written out; every comparison is bit for bit (``torch.equal``)."""

from __future__ import annotations

import copy
import math
from contextlib import contextmanager

import pytest
import torch
import torch.nn.functional as F

from helpers.methods import tiny_model
from tempora_trace.methods import MethodContext, get_method
from tempora_trace.methods._sam import SAM
from tempora_trace.methods.augment import cmf_augment
from tempora_trace.methods.base import BN_TYPES, no_stat_tracking, softmax_entropy
from tempora_trace.methods.cmf import kalman_gain, soft_likelihood_ratio, symmetric_cross_entropy
from tempora_trace.models.demo import build_demo_resnet

CTX = MethodContext(num_classes=10, dataset_family="cifar", batch_size=8)


def batches(k=3, n=8, size=32):
    g = torch.Generator().manual_seed(7)
    return [torch.rand(n, 3, size, size, generator=g) for _ in range(k)]


@contextmanager
def momentum_zero_tracking(model):
    """The previous form: momentum 0 (the buffer update is then an identity) and the batch
    counter restored afterwards."""
    saved = []
    for m in model.modules():
        if isinstance(m, BN_TYPES) and m.track_running_stats:
            saved.append((m, m.momentum, m.num_batches_tracked.clone()))
            m.momentum = 0.0
    try:
        yield
    finally:
        for m, mom, nbt in saved:
            m.momentum = mom
            m.num_batches_tracked.copy_(nbt)


def test_switching_tracking_off_equals_zero_momentum():
    a = build_demo_resnet("bn", 10).train()
    b = copy.deepcopy(a)
    x = batches(1)[0]
    with momentum_zero_tracking(a):
        ya = a(x)
    with no_stat_tracking(b):
        yb = b(x)
    assert torch.equal(ya, yb)
    for (na, ba), (nb, bb) in zip(a.named_buffers(), b.named_buffers()):
        assert na == nb and torch.equal(ba, bb)
    assert all(m.track_running_stats for m in b.modules() if isinstance(m, BN_TYPES))


def legacy_sgd_step(params, bufs, lr, momentum):
    for i, p in enumerate(params):
        g = p.grad
        bufs[i] = g.detach().clone() if bufs[i] is None else bufs[i].mul_(momentum).add_(g)
        p.detach().add_(bufs[i], alpha=-lr)


def test_sam_first_step_equals_the_per_parameter_loop():
    model = build_demo_resnet("bn", 10)
    params = [p for m in model.modules() if isinstance(m, BN_TYPES) for p in (m.weight, m.bias)]
    twin = [p.detach().clone().requires_grad_(True) for p in params]
    g = torch.Generator().manual_seed(3)
    grads = [torch.randn(p.shape, generator=g) for p in params]
    for p, q, gr in zip(params, twin, grads):
        p.grad, q.grad = gr.clone(), gr.clone()
    sam = SAM(torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=True), rho=0.05)
    sam.first_step()
    with torch.no_grad():  # the loop: ε = ρ·g/‖g‖ with ‖g‖ the norm of the per-tensor norms
        norm = torch.linalg.vector_norm(torch.stack([q.grad.norm(2) for q in twin]), 2)
        scale = 0.05 / (norm + 1e-12)
        for q in twin:
            q.add_(q.grad * scale.to(q))
    for p, q in zip(params, twin):
        assert torch.equal(p.detach(), q.detach())
    sam.undo_perturbation()
    model2 = build_demo_resnet("bn", 10)
    for p, q in zip(params, [p for m in model2.modules() if isinstance(m, BN_TYPES) for p in (m.weight, m.bias)]):
        assert torch.equal(p.detach(), q.detach())


def legacy_cmf_update(m, x, logits, bufs):
    """CMF's step as first written: boolean masks, a Python loop per Kalman stage, per-tensor SGD."""
    p = m.params
    with torch.no_grad():
        lg = logits.detach()
        probs = lg.softmax(1)
        div = 1.0 - F.cosine_similarity(m.class_probs_ema.unsqueeze(0), probs, dim=1)
        div = (div - div.min()) / (div.max() - div.min()).clamp_min(1e-12)
        keep = div >= div.mean()
        cert = -softmax_entropy(lg)
        cert = (cert - cert.min()) / (cert.max() - cert.min()).clamp_min(1e-12)
        weights = torch.exp(div * cert / p["temperature"]) * keep
        m.class_probs_ema = p["momentum_probs"] * m.class_probs_ema + (1 - p["momentum_probs"]) * probs.mean(0)
    if not keep.any():
        return
    denom = float(m.context.batch_size)
    loss = (soft_likelihood_ratio(logits, p["slr_clip"]) * weights)[keep].sum() / denom
    x_aug = cmf_augment(x[keep].detach(), m.rng.get("cpu"))
    with momentum_zero_tracking(m.model):
        logits_aug = m.model(x_aug)
    sce = symmetric_cross_entropy(logits_aug, logits[keep], p["sce_alpha"])
    loss = loss + (sce * weights[keep]).sum() / denom
    loss.backward()
    with torch.no_grad():
        legacy_sgd_step(m.trainable, bufs, p["lr"], p["momentum"])
    for q in m.trainable:
        q.grad = None
    with torch.no_grad():
        alpha, gamma = p["alpha"], p["gamma"]
        for h, s in zip(m.hidden, m.source):
            h.mul_(alpha).add_((1.0 - alpha) * s)
        beta, m.hidden_var = kalman_gain(m.hidden_var, alpha, p["q"])
        if beta < 1.0:
            for h, w in zip(m.hidden, m.trainable):
                h.mul_(beta).add_((1.0 - beta) * w.detach())
        for w, h in zip(m.trainable, m.hidden):
            w.mul_(gamma).add_((1.0 - gamma) * h)


@pytest.mark.parametrize("norm", ["bn", "gn"])
def test_cmf_step_equals_its_plain_form(norm):
    source = build_demo_resnet(norm, 10)
    fast = get_method("cmf")(copy.deepcopy(source), CTX)
    slow = get_method("cmf")(copy.deepcopy(source), CTX)
    bufs = [None] * len(slow.trainable)
    for x in batches():
        assert torch.equal(fast.predict(x), slow.predict(x))
        fast.adapt()
        assert fast.last_updated
        pending, slow._pending = slow._pending, None
        with torch.enable_grad():
            legacy_cmf_update(slow, *pending, bufs)
        for a, b in zip(fast.model.state_dict().values(), slow.model.state_dict().values()):
            assert torch.equal(a, b)
        for a, b in zip(fast.hidden, slow.hidden):
            assert torch.equal(a, b)
        assert fast.hidden_var == slow.hidden_var and torch.equal(fast.class_probs_ema, slow.class_probs_ema)


def legacy_sar_update(m, x, logits, bufs):
    """SAR's step as first written: boolean masks, a Python loop for SAM's perturbation."""
    margin = m.params["e_margin"]
    params = [q for _, q in m.adapted]
    entropy = softmax_entropy(logits)
    reliable = entropy < margin
    if not bool(reliable.any()):
        return
    entropy[reliable].mean(0).backward()
    with torch.no_grad():
        norm = torch.linalg.vector_norm(torch.stack([q.grad.norm(2) for q in params]), 2)
        scale = m.params["rho"] / (norm + 1e-12)
        saved = [q.detach().clone() for q in params]
        for q in params:
            q.add_(q.grad * scale.to(q))
    for q in params:
        q.grad = None
    with momentum_zero_tracking(m.model):
        entropy2 = softmax_entropy(m.model(x))[reliable]
    still = entropy2 < margin
    if not bool(still.any()):
        with torch.no_grad():
            for q, w in zip(params, saved):
                q.copy_(w)
        return
    loss = entropy2[still].mean(0)
    value = loss.item()
    if not math.isnan(value):
        a = m.params["loss_ema"]
        m.loss_average = value if m.loss_average is None else a * m.loss_average + (1 - a) * value
    loss.backward()
    with torch.no_grad():
        for q, w in zip(params, saved):
            q.copy_(w)
        legacy_sgd_step(params, bufs, m.params["lr"], m.params["momentum"])
    for q in params:
        q.grad = None


def test_sar_step_equals_its_plain_form():
    source = tiny_model("bn")
    fast = get_method("sar")(copy.deepcopy(source), CTX, reset_constant=0.0)
    slow = get_method("sar")(copy.deepcopy(source), CTX, reset_constant=0.0)
    bufs = [None] * len(slow.adapted)
    updated = []
    for x in batches(n=8, size=8):
        assert torch.equal(fast.predict(x), slow.predict(x))
        fast.adapt()
        updated.append(fast.last_updated)
        pending, slow._pending = slow._pending, None
        with torch.enable_grad():
            legacy_sar_update(slow, *pending, bufs)
        for a, b in zip(fast.model.state_dict().values(), slow.model.state_dict().values()):
            assert torch.equal(a, b)
        assert fast.loss_average == slow.loss_average
    assert all(updated), "every batch took the full two-pass step"
