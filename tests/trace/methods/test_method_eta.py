"""ETA and ETA* (eta-no-reset): reliability and redundancy filters, re-weighting, BN statistics."""

from __future__ import annotations

import math

import pytest
import torch

from helpers.methods import (
    LogitsProbe,
    adapt_with_input_grad,
    batches,
    changed_parameters,
    check_frozen_changes_nothing,
    check_hparams,
    check_reset_bit_identical,
    check_snapshot_restore,
    confident_logits,
    context,
    demo_corrupted_stream,
    demo_method,
    rows_with_gradient,
    run_stream,
    stream_accuracy,
    tiny_model,
)
from tempora_trace.methods import MethodError, get_method

C = 10


def make_probe(**params):
    return get_method("eta")(LogitsProbe(), context(norm="ln"), **params)


def test_reliability_filter_drops_high_entropy_samples_and_reweights():
    method = make_probe()
    x = torch.cat([confident_logits(0, 4), torch.zeros(4, C)])  # 4 confident, 4 uniform (entropy ln 10)
    _, grad = adapt_with_input_grad(method, x)
    assert rows_with_gradient(grad) == [0, 1, 2, 3]
    assert method.last_kept == (4, 4) and method.last_updated
    # oracle for the re-weighted loss: mean over kept samples of H · exp(E0 − H), weights detached
    xo = x.clone().requires_grad_(True)
    h = -(xo.softmax(1) * xo.log_softmax(1)).sum(1)[:4]
    (h * torch.exp(0.4 * math.log(C) - h.detach())).mean().backward()
    torch.testing.assert_close(grad, xo.grad)
    # the moving average starts at the mean probability of the kept samples
    torch.testing.assert_close(method.mean_probs, x[:4].softmax(1).mean(0))


def test_redundancy_filter_drops_samples_like_the_moving_average():
    method = make_probe()
    adapt_with_input_grad(method, confident_logits(0, 4))
    first_mean = method.mean_probs.clone()
    x = torch.cat([confident_logits(0, 4), confident_logits(5, 4)])
    out, grad = adapt_with_input_grad(method, x)
    # class-0 samples are (cos ≈ 1) redundant with the average; class-5 ones (cos ≈ 0) are new
    assert rows_with_gradient(grad) == [4, 5, 6, 7]
    assert method.last_kept == (8, 4)
    expected = 0.9 * first_mean + 0.1 * out[4:].softmax(1).mean(0)
    torch.testing.assert_close(method.mean_probs, expected)
    assert (method.num_reliable, method.num_selected) == (12, 8)


def test_no_step_when_filters_leave_nothing():
    method = make_probe()
    before = {n: p.detach().clone() for n, p in method.model.named_parameters()}
    _, grad = adapt_with_input_grad(method, torch.zeros(6, C))
    assert rows_with_gradient(grad) == [] and not method.last_updated
    assert changed_parameters(before, method.model) == set()
    assert method.mean_probs is None


def test_only_norm_affine_parameters_move_and_bn_statistics_follow_source_option():
    xs = batches(3)
    for name, keeps_source in (("eta", False), ("eta-no-reset", True)):
        model = tiny_model()
        source_mean = model.layer1[1].running_mean.clone()
        method = get_method(name)(model, context())
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        first_bn_input = []
        h = model.layer1[1].register_forward_hook(lambda m, inp, out: first_bn_input.append(inp[0].detach()))  # noqa: B023 (removed below)
        run_stream(method, xs[:1])
        h.remove()
        changed = changed_parameters(before, model)
        assert changed and all(".1." in n for n in changed), changed  # only BN affine params (layerN.1.*)
        start = source_mean if keeps_source else torch.zeros_like(source_mean)
        expected = 0.9 * start + 0.1 * first_bn_input[0].mean((0, 2, 3))
        torch.testing.assert_close(model.layer1[1].running_mean, expected, atol=1e-5, rtol=0)
        assert method.hparams()["source_stats"] == ("keep" if keeps_source else "discard")


def test_contract_bn_and_gn():
    xs = batches(4)
    for norm in ("bn", "gn"):
        check_reset_bit_identical(get_method("eta")(tiny_model(norm), context(norm=norm)), xs)
        check_snapshot_restore(get_method("eta")(tiny_model(norm), context(norm=norm)), xs)
        check_frozen_changes_nothing(get_method("eta")(tiny_model(norm), context(norm=norm)), xs[:2])
    check_reset_bit_identical(get_method("eta-no-reset")(tiny_model(), context()), xs)
    check_frozen_changes_nothing(get_method("eta-no-reset")(tiny_model(), context()), xs[:2])


def test_published_defaults_scale_with_dataset():
    hp = check_hparams(get_method("eta")(tiny_model(), context()), ("lr", "momentum", "e_margin", "d_margin", "source_stats"))
    assert hp["lr"] == 0.00025 and hp["momentum"] == 0.9
    assert hp["e_margin"] == pytest.approx(0.4 * math.log(10)) and hp["d_margin"] == 0.4
    imagenet = get_method("eta").default_params(context(num_classes=1000, family="imagenet"))
    assert imagenet["e_margin"] == pytest.approx(0.4 * math.log(1000)) and imagenet["d_margin"] == 0.05
    assert get_method("eta").default_params(context(num_classes=100))["d_margin"] == 0.1


def test_variant_refuses_models_without_batchnorm():
    with pytest.raises(MethodError, match="eta-no-reset.*BatchNorm.*GroupNorm.*demo-resnet"):
        get_method("eta-no-reset")(tiny_model("gn"), context(norm="gn"))


@pytest.mark.slow
def test_short_adaptation_beats_standard_on_corrupted_demo_data():
    """20 batches of 64 gaussian-noise (severity 5) demo images: eta serves clearly more
    correct predictions than the unadapted model (the paper's finding on BN models)."""
    stream = demo_corrupted_stream("gaussian_noise", 5)
    standard = stream_accuracy(demo_method("standard"), stream)
    adapted = stream_accuracy(demo_method("eta"), stream)
    assert adapted > standard + 5.0, (standard, adapted)
