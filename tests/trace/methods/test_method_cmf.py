"""CMF: the Kalman filter pulls the hidden model towards the source and the adapted model
towards the hidden one, with the published gain schedule; the prediction is the adapted
model's prior-corrected output; the augmented forward leaves BN statistics alone; contract."""

from __future__ import annotations

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
from tempora_trace.methods import get_method
from tempora_trace.methods.augment import cmf_augment
from tempora_trace.methods.cmf import CMF, kalman_gain, prior_corrected, soft_likelihood_ratio

torch.set_num_threads(1)


def cmf(norm: str = "bn", **params) -> CMF:
    return CMF(tiny_model(norm), context(norm=norm), **params)


def dist(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return sum(float((x.detach() - y.detach()).pow(2).sum()) for x, y in zip(a, b)) ** 0.5


def test_registered_with_published_defaults():
    assert get_method("cmf") is CMF
    hp = check_hparams(cmf(), ("lr", "q", "alpha", "gamma", "momentum_probs", "temperature"))
    assert (hp["lr"], hp["q"], hp["alpha"], hp["gamma"], hp["momentum_probs"]) == (0.0002, 0.00025, 0.99, 0.99, 0.9)
    assert hp["temperature"] == pytest.approx(1 / 3)
    vit = CMF.default_params(context(norm="ln", family="imagenet", num_classes=1000))
    assert (vit["q"], vit["lr"]) == (0.005, 0.00025)


def test_kalman_gain_hand_worked():
    # var = 0.99²·0 + 0.00025 = 0.00025; β = 0.99975 / (0.00025 + 0.99975) = 0.99975; var' = β·var
    beta, var = kalman_gain(0.0, 0.99, 0.00025)
    assert beta == pytest.approx(0.99975, abs=1e-12) and var == pytest.approx(0.99975 * 0.00025)
    # a large variance is floored at gain 0.89; a negligible one saturates to 1 (no update)
    assert kalman_gain(10.0, 0.99, 0.005)[0] == 0.89
    assert kalman_gain(0.0, 0.99, 1e-6)[0] == 1.0


def test_prior_correction_hand_worked():
    logits = torch.tensor([[2.0, 0.0], [0.0, 0.0]])
    prior = logits.softmax(1).mean(0)
    smooth = 0.5 / prior.max()
    expected = logits * (prior + smooth) / (1 + 2 * smooth)
    assert torch.allclose(prior_corrected(logits), expected)
    method = cmf()
    x = batches(1)[0]
    out = method.predict(x)
    with torch.no_grad():
        plain = method.model(x)  # same train-mode BN forward, before any update
    assert torch.allclose(out, prior_corrected(plain), atol=1e-6)
    assert torch.equal(cmf(prior_correction=False).predict(x), plain)


def test_slr_matches_formula():
    logits = torch.tensor([[3.0, 0.0, -1.0]])
    p = logits.softmax(1).clamp(max=0.99)
    assert torch.allclose(soft_likelihood_ratio(logits), -(p * torch.log(p / (1 - p) + 1e-5)).sum(1))


def test_hidden_state_moves_toward_source_and_pulls_model():
    method = cmf(q=0.005)  # a larger process noise gives a visible gain (β ≈ 0.995)
    src = [s.clone() for s in method.source]
    with torch.no_grad():  # pretend a long adaptation drifted both models away from the source
        for w, h in zip(method.trainable, method.hidden):
            w.add_(0.5)
            h.add_(0.5)
    hidden_before = [h.clone() for h in method.hidden]
    method.predict(batches(1)[0])
    method.adapt()
    assert method.last_updated
    # the predict step alone shrinks the hidden model's distance to the source by α = 0.99;
    # the update towards the (still drifted) adapted model cannot undo that
    assert dist(method.hidden, src) < 0.995 * dist(hidden_before, src)
    # and the adapted model is pulled back towards the hidden (source-leaning) state
    d_model = dist(method.trainable, src)
    assert d_model < dist(hidden_before, src)
    assert method.hidden_var > 0


def test_filter_equations_on_one_step():
    """Oracle: redo the three moment updates in plain Python on one parameter tensor."""
    method = cmf(q=0.005)
    x = batches(1)[0]
    w0 = method.trainable[0].detach().clone()
    h0 = method.hidden[0].clone()
    method.predict(x)
    # the same model, batch and augmentation draw with α = γ = 1 (no prior pull, no ensemble)
    # gives the weights right after the SGD step; then apply the filter by hand
    sgd_only = cmf(q=0.005, alpha=1.0, gamma=1.0)
    sgd_only.predict(x)
    method.adapt()
    sgd_only.adapt()
    w_sgd = sgd_only.trainable[0].detach()
    beta, _ = kalman_gain(0.0, 0.99, 0.005)
    h_pred = 0.99 * h0 + 0.01 * w0  # source == initial weights
    h_new = beta * h_pred + (1 - beta) * w_sgd
    w_new = 0.99 * w_sgd + 0.01 * h_new
    assert torch.allclose(method.hidden[0], h_new, atol=1e-6)
    assert torch.allclose(method.trainable[0].detach(), w_new, atol=1e-6)


def test_augmented_view_and_stats():
    x = batches(1)[0]
    aug = cmf_augment(x, torch.Generator().manual_seed(0))
    assert aug.shape == x.shape and 0 <= aug.min() and aug.max() <= 1 and not torch.equal(aug, x)
    method = cmf()
    method.predict(x)
    tracked = {k: v.clone() for k, v in method.model.state_dict().items() if "running" in k}
    method.adapt()
    for k, v in tracked.items():
        assert torch.equal(method.model.state_dict()[k], v), f"{k} moved during the augmented forward"


def test_keep_source_stats_option():
    model = tiny_model("bn")
    source_mean = model.layer1[1].running_mean.clone()
    CMF(model, context(), source_stats="keep")
    assert torch.equal(model.layer1[1].running_mean, source_mean)
    model = tiny_model("bn")
    CMF(model, context())
    assert torch.equal(model.layer1[1].running_mean, torch.zeros_like(source_mean))


@pytest.mark.parametrize("norm", ["bn", "ln"])
def test_contract(norm):
    xs = batches(4)
    check_reset_bit_identical(cmf(norm), xs)
    check_snapshot_restore(cmf(norm), xs)
    check_frozen_changes_nothing(cmf(norm), xs)


@pytest.mark.slow
def test_short_adaptation_beats_standard_on_corrupted_demo():
    """25 batches of 64 of fog at severity 5 (standard inference on demo-resnet ≈ 14 %): CMF's
    online accuracy must clearly exceed it (measured ≈ 48 %)."""
    from helpers.demo_stream import stream_accuracy

    standard = stream_accuracy("standard", "demo-resnet", "fog", 5, batches=25)
    adapted = stream_accuracy("cmf", "demo-resnet", "fog", 5, batches=25)
    assert adapted > standard + 0.15, f"cmf {adapted:.3f} vs standard {standard:.3f}"


def test_bad_options_are_one_line_errors():
    from tempora_trace.methods import MethodError

    for bad in ({"alpha": 1.5}, {"q": "x"}, {"temperature": 0.0}, {"nesterov": True}):
        with pytest.raises(MethodError, match="cmf"):
            cmf(**bad)


@pytest.mark.usefixtures("tiny_models")
def test_traces_end_to_end(cifar_c_root, tmp_path):
    from helpers.demo_stream import trace_tiny

    trace = trace_tiny("cmf", "tiny-bn", cifar_c_root, tmp_path)
    assert set(CMF.default_params(context())) <= set(trace["meta"]["method_params"])
    adapt = [i for i, p in enumerate(trace["phase"]) if p == "adapt"]
    assert len(adapt) == 4 and all(trace["updated"][i] for i in adapt)
