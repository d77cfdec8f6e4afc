"""SAR: reliable sharpness-aware entropy minimisation, top-stage exclusion, model recovery."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

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
from tempora_trace.methods import get_method
from tempora_trace.methods.sar import sar_excluded_modules

C = 10
MARGIN = 0.4 * math.log(C)


def probe_sar(**params):
    return get_method("sar")(LogitsProbe(), context(norm="ln"), **params)


def entropy(z: torch.Tensor) -> torch.Tensor:
    return -(z.softmax(1) * z.log_softmax(1)).sum(1)


def test_update_is_sam_on_reliable_samples():
    """Oracle by hand: g1 at w on reliable samples, ε = ρ g1/‖g1‖, g2 at w+ε on samples still
    reliable there, then the first momentum-SGD step w − lr·g2."""
    x = torch.cat([confident_logits(1, 3, strength=5.0), torch.zeros(3, C), confident_logits(4, 2, strength=6.0)])
    method = probe_sar()
    _, grad = adapt_with_input_grad(method, x)
    assert rows_with_gradient(grad) == [0, 1, 2, 6, 7]  # high-entropy rows 3–5 never contribute

    w = torch.ones(C, requires_grad=True)
    b = torch.zeros(C, requires_grad=True)
    h = entropy(x * w + b)
    keep = h < MARGIN
    g1 = torch.autograd.grad(h[keep].mean(), (w, b))
    norm = torch.sqrt(sum((g**2).sum() for g in g1))
    w2, b2 = (w + 0.05 * g1[0] / norm).detach().requires_grad_(), (b + 0.05 * g1[1] / norm).detach().requires_grad_()
    h2 = entropy(x * w2 + b2)[keep]
    loss2 = h2[h2 < MARGIN].mean()
    g2 = torch.autograd.grad(loss2, (w2, b2))
    lr = method.params["lr"]  # 0.001: a LayerNorm model gets SAR's ViT learning rate
    assert lr == 0.001
    torch.testing.assert_close(method.model.norm.weight.detach(), 1 - lr * g2[0])
    torch.testing.assert_close(method.model.norm.bias.detach(), -lr * g2[1])
    assert method.last_loss == pytest.approx(loss2.item(), rel=1e-5)
    assert method.loss_average == pytest.approx(loss2.item(), rel=1e-5)


def test_model_recovery_when_loss_average_falls_below_reset_constant():
    """Feed ever more confident batches: the loss average decays; SAR must reset exactly at the
    first batch where the plain-Python EMA of its second-pass losses drops below 0.2."""
    method = probe_sar()
    source = {n: p.detach().clone() for n, p in method.model.named_parameters()}
    ema, recovered_at = None, None
    strengths = [4.5] + [12.0] * 15
    for i, s in enumerate(strengths):
        adapt_with_input_grad(method, confident_logits(i % C, 8, strength=s))
        assert method.last_updated
        ema = method.last_loss if ema is None else 0.9 * ema + 0.1 * method.last_loss
        if ema < 0.2:
            recovered_at = i
            assert method.last_recovered and method.recoveries == 1
            assert method.loss_average is None
            assert changed_parameters(source, method.model) == set()  # back to the source weights
            break
        assert not method.last_recovered
        assert method.loss_average == pytest.approx(ema, rel=1e-6)
    assert recovered_at is not None and recovered_at > 3, recovered_at
    # after recovery the average restarts from the next loss
    adapt_with_input_grad(method, confident_logits(0, 8, strength=4.5))
    assert method.loss_average == pytest.approx(method.last_loss)


def test_no_update_without_reliable_samples():
    method = probe_sar()
    _, grad = adapt_with_input_grad(method, torch.zeros(4, C))
    assert rows_with_gradient(grad) == [] and not method.last_updated and method.loss_average is None


def test_last_stage_is_excluded_and_perturbed_pass_leaves_bn_buffers_alone():
    model = tiny_model()
    method = get_method("sar")(model, context())
    assert method.hparams()["excluded_modules"] == ["layer2"]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    inputs = []
    h = model.layer1[1].register_forward_hook(lambda m, i, o: inputs.append(i[0].detach()))
    run_stream(method, batches(1))
    h.remove()
    assert method.last_updated
    assert changed_parameters(before, model) == {"layer1.1.weight", "layer1.1.bias"}
    # two forwards ran (clean + perturbed), but the running mean saw only the clean one
    assert len(inputs) == 2
    torch.testing.assert_close(model.layer1[1].running_mean, 0.1 * inputs[0].mean((0, 2, 3)))
    assert model.layer1[1].num_batches_tracked.item() == 1


def test_excluded_modules_follow_the_authors_choice_on_paper_architectures():
    import torchvision

    assert sar_excluded_modules(torchvision.models.resnet18()) == ["layer4"]

    class ViTLike(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.Sequential(*[nn.Sequential(nn.LayerNorm(4), nn.Linear(4, 4)) for _ in range(12)])
            self.norm = nn.LayerNorm(4)
            self.head = nn.Linear(4, 3)

    assert sar_excluded_modules(ViTLike()) == ["blocks.9", "blocks.10", "blocks.11", "norm"]

    class StagesInOneContainer(nn.Module):  # the demo ResNet's layout: one block per stage
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
            self.layers = nn.Sequential(*[nn.Sequential(nn.Conv2d(4, 4, 3), nn.BatchNorm2d(4)) for _ in range(3)])
            self.fc = nn.Linear(4, 2)

    assert sar_excluded_modules(StagesInOneContainer()) == ["layers.2"]
    from tempora_trace.models.demo import build_demo_resnet

    assert sar_excluded_modules(build_demo_resnet()) == ["layers.2"]  # the demo ResNet's third (last) stage


def test_contract_bn_and_gn():
    xs = batches(4)
    for norm in ("bn", "gn"):
        check_reset_bit_identical(get_method("sar")(tiny_model(norm), context(norm=norm)), xs)
        check_snapshot_restore(get_method("sar")(tiny_model(norm), context(norm=norm)), xs)
        check_frozen_changes_nothing(get_method("sar")(tiny_model(norm), context(norm=norm)), xs[:2])
    hp = check_hparams(get_method("sar")(tiny_model(), context()), ("lr", "momentum", "rho", "e_margin", "reset_constant", "source_stats"))
    assert (hp["lr"], hp["momentum"], hp["rho"], hp["reset_constant"]) == (0.00025, 0.9, 0.05, 0.2)
    assert hp["e_margin"] == pytest.approx(MARGIN)
    assert get_method("sar").default_params(context(num_classes=1000, family="imagenet", norm="ln"))["lr"] == 0.001


@pytest.mark.parametrize(
    "name,bad",
    [
        ("sar", {"lr": "abc"}),
        ("sar", {"momentum": 2.0}),
        ("sar", {"rho": -0.1}),
        ("eta", {"d_margin": -1}),
        ("shot-im", {"source_stats": "maybe"}),
        ("lame", {"knn": 0}),
        ("lame", {"max_steps": 2.5}),
        ("eta", {"typo": 1}),
    ],
)
def test_bad_options_are_one_line_method_errors(name, bad):
    from tempora_trace.methods import MethodError

    with pytest.raises(MethodError) as err:
        get_method(name)(tiny_model(), context(), **bad)
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_short_adaptation_beats_standard_on_corrupted_demo_data():
    """20 batches of 64 gaussian-noise (severity 5) demo images: sar serves clearly more
    correct predictions than the unadapted model (the paper's finding on BN models)."""
    stream = demo_corrupted_stream("gaussian_noise", 5)
    standard = stream_accuracy(demo_method("standard"), stream)
    adapted = stream_accuracy(demo_method("sar"), stream)
    assert adapted > standard + 5.0, (standard, adapted)
