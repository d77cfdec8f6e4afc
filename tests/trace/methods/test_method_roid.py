"""ROID: the published optimiser per dataset; the diversity/certainty weights, the prior
correction, the weight ensembling and the loss against independent recomputations; the
prediction is the prior-corrected forward; contract, policies and the tracer end to end."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from helpers.methods import (
    batches,
    check_frozen_changes_nothing,
    check_hparams,
    check_reset_bit_identical,
    check_snapshot_restore,
    context,
    tiny_model,
)
from tempora_trace.methods import MethodError, get_method
from tempora_trace.methods.augment import cmf_augment
from tempora_trace.methods.roid import ROID, roid_weights

torch.set_num_threads(1)


def roid(norm: str = "bn", batch_size: int = 16, **params) -> ROID:
    return ROID(tiny_model(norm), context(norm=norm, batch_size=batch_size), **params)


def test_registered_with_the_published_optimiser_per_dataset():
    assert get_method("roid") is ROID
    hp = check_hparams(roid(), ("optimizer", "lr", "momentum_src", "momentum_probs", "temperature"))
    assert (hp["optimizer"], hp["lr"], hp["momentum_src"], hp["momentum_probs"]) == ("adam", 0.001, 0.99, 0.9)
    assert hp["temperature"] == pytest.approx(1 / 3)
    adam = roid().optimizer
    assert isinstance(adam, torch.optim.Adam)
    assert adam.param_groups[0]["betas"] == (0.9, 0.999) and adam.param_groups[0]["weight_decay"] == 0.0
    imagenet = ROID(tiny_model("bn", num_classes=10), context(family="imagenet"))
    sgd = imagenet.optimizer
    assert isinstance(sgd, torch.optim.SGD)
    g = sgd.param_groups[0]
    assert (g["lr"], g["momentum"], g["nesterov"], g["dampening"], g["weight_decay"]) == (0.00025, 0.9, True, 0.0, 0.0)
    # the authors train the affine parameters of the normalisation layers, nothing else
    trained = {n for n, p in imagenet.model.named_parameters() if p.requires_grad}
    assert trained == {n for n, _ in imagenet.adapted} and trained and all(n.endswith(("weight", "bias")) for n in trained)


def _direct_weights(rows: list[list[float]], ema: list[float], temperature: float) -> list[float]:
    """Plain-Python ROID weights, one sample at a time."""
    probs = []
    for r in rows:
        z = [math.exp(v - max(r)) for v in r]
        probs.append([v / sum(z) for v in z])
    norm_ema = math.sqrt(sum(e * e for e in ema))
    div = [1 - sum(e * q for e, q in zip(ema, p)) / (norm_ema * math.sqrt(sum(q * q for q in p))) for p in probs]
    cert = [sum(q * math.log(q) for q in p) for p in probs]
    div = [(d - min(div)) / (max(div) - min(div)) for d in div]
    cert = [(c - min(cert)) / (max(cert) - min(cert)) for c in cert]
    mean_div = sum(div) / len(div)
    return [math.exp(d * c / temperature) if d >= mean_div else 0.0 for d, c in zip(div, cert)]


def test_weights_match_a_direct_computation():
    g = torch.Generator().manual_seed(3)
    logits = 3 * torch.randn(7, 5, generator=g, dtype=torch.float64)
    ema = torch.softmax(torch.randn(5, generator=g, dtype=torch.float64), 0)
    weights, keep = roid_weights(logits, ema, 1 / 3)
    expected = _direct_weights(logits.tolist(), ema.tolist(), 1 / 3)
    assert weights.tolist() == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert keep.tolist() == [w > 0 for w in expected]
    assert 0 < int(keep.sum()) < 7
    # one sample: the scores are constant, normalise to 0 and the sample is kept with weight 1
    w1, k1 = roid_weights(logits[:1], ema, 1 / 3)
    assert w1.tolist() == [1.0] and k1.tolist() == [True]


def test_prior_correction_matches_its_formula_and_is_the_prediction():
    logits = [[2.0, 0.0, -1.0], [0.5, 1.5, 0.0]]
    b, c = 2, 3
    probs = [[math.exp(v) / sum(math.exp(u) for u in r) for v in r] for r in logits]
    prior = [sum(p[k] for p in probs) / b for k in range(c)]
    smooth = max(1 / b, 1 / c) / max(prior)
    expected = [[v * (prior[k] + smooth) / (1 + smooth * c) for k, v in enumerate(r)] for r in logits]
    method = roid()
    x = batches(1)[0]
    with torch.no_grad():
        plain = copy.deepcopy(method.model)(x)  # the same train-mode forward, before any update
    out = method.predict(x)
    from tempora_trace.methods.cmf import prior_corrected

    assert prior_corrected(torch.tensor(logits, dtype=torch.float64)).tolist() == [pytest.approx(r, rel=1e-12) for r in expected]
    assert torch.allclose(out, prior_corrected(plain), atol=1e-6)
    assert not torch.allclose(out, plain)
    assert torch.equal(roid(prior_correction=False).predict(x), plain)
    frozen = roid()
    frozen.freeze()
    with torch.no_grad():
        eval_out = frozen.model(x)
    assert torch.equal(frozen.predict(x), eval_out)  # frozen: no batch-level correction


def test_weight_ensembling_matches_its_formula():
    method = roid()
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():  # a drifted model: random offsets on every adapted parameter
        for q in method.trainable:
            q.add_(torch.randn(q.shape, generator=g))
    before = [q.detach().clone() for q in method.trainable]
    source = [s.clone() for s in method.source]
    method._ensemble()
    for q, b, s in zip(method.trainable, before, source):
        expected = [0.99 * bv + 0.01 * sv for bv, sv in zip(b.flatten().tolist(), s.flatten().tolist())]
        assert q.detach().flatten().tolist() == pytest.approx(expected, rel=1e-6, abs=1e-7)


def test_each_update_is_the_step_then_the_ensemble():
    """Same seed, model, batch and augmentation draw: with α = 0.99 the parameters after one
    adapted batch are 0.99 · (the step alone, α = 1) + 0.01 · source."""
    x = batches(1)[0]
    torch.manual_seed(7)
    method = roid()
    torch.manual_seed(7)
    step_only = roid(momentum_src=1.0)
    source = [s.clone() for s in method.source]
    method.predict(x)
    step_only.predict(x)
    method.adapt()
    step_only.adapt()
    assert method.last_updated and step_only.last_updated
    for q, w, s in zip(method.trainable, step_only.trainable, source):
        assert torch.allclose(q.detach(), 0.99 * w.detach() + 0.01 * s, atol=1e-6)
        assert not torch.equal(w.detach(), s)


@pytest.mark.parametrize("n", [16, 10])
def test_loss_matches_a_plain_torch_recomputation(n):
    """The objective ROID steps on, recomputed from a copy of the model: weighted SLR plus the
    weighted symmetric cross-entropy to the augmented view of the kept samples, over the
    configured batch size (16) also on a partial batch."""
    method = roid(batch_size=16)
    twin = copy.deepcopy(method.model)
    x = batches(1)[0][:n]
    ema = method.class_probs_ema.clone()
    gen = torch.Generator()
    gen.set_state(method.rng.get("cpu").get_state())
    seen: list[torch.Tensor] = []
    method._step = lambda loss: seen.append(loss.detach())  # record the objective, take no step
    method.predict(x)
    method.adapt()
    with torch.no_grad():
        logits = twin(x).double()
        p = logits.softmax(1)
        weights, keep = roid_weights(logits, ema.double(), 1 / 3)
        pc = p.clamp(max=0.99)
        slr = -(pc * torch.log(pc / (1 - pc) + 1e-5)).sum(1)
        idx = keep.nonzero().squeeze(1)
        aug = twin(cmf_augment(x[idx], gen)).double()
        q_log, p_log = aug.log_softmax(1), logits[idx].log_softmax(1)
        sce = -0.5 * (p_log.exp() * q_log).sum(1) - 0.5 * (q_log.exp() * p_log).sum(1)
        expected = (slr * weights).sum() / 16 + (sce * weights[idx]).sum() / 16
    assert len(seen) == 1 and method.last_selected == int(idx.numel())
    assert float(seen[0]) == pytest.approx(float(expected), rel=1e-4)
    # the EMA of class probabilities moved by the published momentum
    assert torch.allclose(method.class_probs_ema, 0.9 * ema + 0.1 * p.float().mean(0), atol=1e-6)


def test_ablation_switches():
    x = batches(1)[0]
    for params in ({"weighting": False}, {"consistency": False}, {"weighting": False, "consistency": False}):
        method = roid(**params)
        ema = method.class_probs_ema.clone()
        method.predict(x)
        method.adapt()
        assert method.last_updated
        if not params.get("weighting", True):
            assert method.last_selected == x.shape[0] and torch.equal(method.class_probs_ema, ema)


def test_augmented_forward_leaves_bn_statistics_alone():
    method = roid()
    x = batches(1)[0]
    method.predict(x)
    tracked = {k: v.clone() for k, v in method.model.state_dict().items() if "running" in k}
    method.adapt()
    for k, v in tracked.items():
        assert torch.equal(method.model.state_dict()[k], v), f"{k} moved during the augmented forward"


@pytest.mark.parametrize("norm", ["bn", "ln"])
def test_contract(norm):
    xs = batches(4)
    check_reset_bit_identical(roid(norm), xs)
    check_snapshot_restore(roid(norm), xs)
    check_frozen_changes_nothing(roid(norm), xs)


@pytest.mark.slow
def test_short_adaptation_beats_standard_on_corrupted_demo():
    """25 batches of 64 of fog at severity 5 (standard inference on demo-resnet ≈ 16 %): ROID's
    online accuracy must clearly exceed it (measured ≈ 56 %, as CMF's)."""
    from helpers.demo_stream import stream_accuracy

    standard = stream_accuracy("standard", "demo-resnet", "fog", 5, batches=25)
    adapted = stream_accuracy("roid", "demo-resnet", "fog", 5, batches=25)
    assert adapted > standard + 0.15, f"roid {adapted:.3f} vs standard {standard:.3f}"


def test_bad_options_are_one_line_errors():
    for bad in ({"momentum_src": 1.5}, {"optimizer": "rmsprop"}, {"temperature": 0.0}, {"lr": -1.0}, {"weighting": "yes"}):
        with pytest.raises(MethodError, match="roid"):
            roid(**bad)
    with pytest.raises(MethodError, match="Nesterov"):
        roid(optimizer="sgd", momentum=0.0)


@pytest.mark.usefixtures("tiny_models")
def test_traces_end_to_end(cifar_c_root, tmp_path):
    from helpers.demo_stream import trace_tiny

    trace = trace_tiny("roid", "tiny-bn", cifar_c_root, tmp_path)
    assert set(ROID.default_params(context())) <= set(trace["meta"]["method_params"])
    adapt = [i for i, p in enumerate(trace["phase"]) if p == "adapt"]
    assert len(adapt) == 4 and all(trace["updated"][i] for i in adapt)


@pytest.mark.usefixtures("tiny_models")
def test_policy_adapts_every_other_batch(cifar_c_root, tmp_path):
    import pyarrow.parquet as pq

    from tempora_trace.config import TraceConfig
    from tempora_trace.runner import trace_run

    cfg = TraceConfig(
        method="roid",
        policy="every:2",
        dataset="cifar10-c",
        model="tiny-bn",
        data_root=str(cifar_c_root),
        domains=["gaussian_noise"],
        batch_size=8,
        out=str(tmp_path),
        quiet=True,
        frozen_sample=2,
        warmup_batches=1,
    )
    table = pq.read_table(trace_run(cfg)).to_pydict()
    rows = [(s, u, lm) for s, u, lm, ph in zip(table["step"], table["updated"], table["l_ms"], table["phase"]) if ph == "adapt"]
    assert [u for _, u, _ in rows] == [s % 2 == 0 for s, _, _ in rows]
    assert any(u for _, u, _ in rows) and not all(u for _, u, _ in rows)
    assert all(lm == 0 for _, u, lm in rows if not u)
