"""DeYO: the PLPD filter acts, the shuffled forward leaves BN statistics alone, and the
method honours the tracer contract (reset, snapshot/restore, frozen mode)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from helpers.methods import (
    batches,
    changed_parameters,
    check_frozen_changes_nothing,
    check_hparams,
    check_reset_bit_identical,
    check_snapshot_restore,
    context,
    tiny_model,
)
from tempora_trace.methods import get_method
from tempora_trace.methods.augment import patch_shuffle
from tempora_trace.methods.deyo import DeYO, deyo_params

torch.set_num_threads(1)


class PixelLinear(nn.Module):
    """LayerNorm over all pixels, then a position-dependent linear head: shuffling patches of
    a structured image changes its prediction, shuffling a uniform-colour image cannot."""

    def __init__(self, size: int = 8, num_classes: int = 10, scale: float = 40.0, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.ln = nn.LayerNorm(3 * size * size)
        self.fc = nn.Linear(3 * size * size, num_classes)
        with torch.no_grad():
            self.fc.weight.copy_(torch.randn(num_classes, 3 * size * size, generator=g) * scale / math.sqrt(3 * size * size))
            self.fc.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.ln(x.flatten(1)))


def uniform_images(n: int, size: int = 8, seed: int = 3) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    colours = torch.rand(n, 3, 1, 1, generator=g)
    return colours.expand(n, 3, size, size).contiguous()


def structured_images(n: int, size: int = 8, seed: int = 4) -> torch.Tensor:
    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


def deyo(model: nn.Module, norm: str = "ln", **params) -> DeYO:
    return DeYO(model, context(norm=norm), **params)


def test_registered_with_published_defaults():
    assert get_method("deyo") is DeYO
    hp = check_hparams(deyo(tiny_model("bn"), "bn"), ("lr", "ent_threshold", "ent_margin", "plpd_threshold", "patch_len"))
    assert hp["ent_threshold"] == pytest.approx(0.5 * math.log(10))
    assert hp["ent_margin"] == pytest.approx(0.4 * math.log(10))
    assert (hp["plpd_threshold"], hp["patch_len"], hp["lr"], hp["source_stats"]) == (0.2, 4, 0.00025, "discard")
    imagenet = DeYO.default_params(context(num_classes=1000, family="imagenet"))
    assert imagenet["ent_threshold"] == pytest.approx(0.5 * math.log(1000))


def test_patch_shuffle_permutes_whole_patches():
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).reshape(2, 3, 8, 8)
    out = patch_shuffle(x, 4, torch.Generator().manual_seed(0))
    for b in range(2):
        src = {tuple(x[b, :, i : i + 2, j : j + 2].flatten().tolist()) for i in range(0, 8, 2) for j in range(0, 8, 2)}
        dst = {tuple(out[b, :, i : i + 2, j : j + 2].flatten().tolist()) for i in range(0, 8, 2) for j in range(0, 8, 2)}
        assert src == dst  # the same 16 patches, rearranged
    assert not torch.equal(out, x)


def test_plpd_filter_drops_shuffle_insensitive_samples():
    # Uniform-colour images are confident (they pass the entropy filter) but a patch shuffle
    # leaves them unchanged, so PLPD = 0 and nothing may be learned from them.
    method = deyo(PixelLinear())
    before = {n: p.detach().clone() for n, p in method.model.named_parameters()}
    method.predict(uniform_images(16))
    method.adapt()
    assert method.last_counts[0] == 16, "uniform images should pass the entropy filter"
    assert method.last_counts[1] == 0 and method.last_updated is False
    assert changed_parameters(before, method.model) == set()

    # The same batch with the PLPD filter disabled (threshold below any PLPD) does update,
    # so the PLPD stage alone withheld the update above.
    open_gate = deyo(PixelLinear(), plpd_threshold=-1.0)
    open_gate.predict(uniform_images(16))
    open_gate.adapt()
    assert open_gate.last_updated and changed_parameters(before, open_gate.model) == {"ln.weight", "ln.bias"}

    # Structured images: their predictions hinge on layout, so PLPD keeps (most of) them.
    method.predict(structured_images(16))
    method.adapt()
    assert method.last_counts[1] >= 8 and method.last_updated
    assert changed_parameters(before, method.model) == {"ln.weight", "ln.bias"}

    # Mixed batch: only structured samples can survive the PLPD stage.
    mixed = torch.cat([uniform_images(8, seed=5), structured_images(8, seed=6)])
    method.predict(mixed)
    method.adapt()
    assert method.last_counts[0] >= 8 and 0 < method.last_counts[1] <= 8


def test_skips_top_layers_like_the_authors():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer3 = nn.BatchNorm2d(4)
            self.layer4 = nn.BatchNorm2d(4)

    net = Net()
    assert {id(p) for p in deyo_params(net)} == {id(net.layer3.weight), id(net.layer3.bias)}

    class ViTLike(nn.Module):  # timm names, inside the tracer's ``Normalized`` wrapper (``net.``)
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(nn.LayerNorm(4) for _ in range(12))
            self.norm = nn.LayerNorm(4)

    wrapper = nn.Module()
    wrapper.net = ViTLike()
    kept = {id(p) for p in deyo_params(wrapper)}
    expected = {id(p) for b in wrapper.net.blocks[:9] for p in (b.weight, b.bias)}
    assert kept == expected  # blocks 0-8 only: blocks 9-11 and the final norm stay frozen


def test_shuffled_forward_does_not_move_running_stats():
    torch.manual_seed(0)
    model = tiny_model("bn")
    method = deyo(model, "bn", ent_threshold=10.0, plpd_threshold=-1.0)  # every sample reaches the 2nd forward
    x = batches(1)[0]
    method.predict(x)
    expected = {k: v.clone() for k, v in model.state_dict().items() if "running" in k}
    method.adapt()
    assert method.last_updated
    for k, v in expected.items():
        assert torch.equal(model.state_dict()[k], v), f"{k} moved during the shuffled forward"
    # and the clean forward tracked the batch statistics from a discarded (0, 1) start
    assert not torch.equal(expected["layer1.1.running_mean"], torch.zeros_like(expected["layer1.1.running_mean"]))


@pytest.mark.parametrize("norm", ["bn", "ln"])
def test_contract(norm):
    # the untrained tiny BN model is unconfident and shuffle-insensitive: open both filters so
    # the contract is checked on batches that really update
    params = {"ent_threshold": 10.0, "plpd_threshold": -1.0}
    make = (lambda: deyo(tiny_model(norm), norm, **params)) if norm == "bn" else (lambda: deyo(PixelLinear(), "ln"))
    xs = batches(4) if norm == "bn" else [structured_images(16, seed=s) for s in range(4)]
    check_reset_bit_identical(make(), xs)
    check_snapshot_restore(make(), xs)
    check_frozen_changes_nothing(make(), xs)
    m = make()
    for x in xs:
        m.predict(x)
        m.adapt()
    assert m.last_updated, "the contract checks should exercise real updates"


@pytest.mark.slow
def test_short_adaptation_beats_standard_on_corrupted_demo():
    """25 batches of 64 of fog at severity 5 (standard inference on demo-resnet ≈ 14 %): DeYO's
    online accuracy must clearly exceed it (measured ≈ 49 %)."""
    from helpers.demo_stream import stream_accuracy

    standard = stream_accuracy("standard", "demo-resnet", "fog", 5, batches=25)
    adapted = stream_accuracy("deyo", "demo-resnet", "fog", 5, batches=25)
    assert adapted > standard + 0.15, f"deyo {adapted:.3f} vs standard {standard:.3f}"


@pytest.mark.usefixtures("tiny_models")
def test_traces_end_to_end(cifar_c_root, tmp_path):
    from helpers.demo_stream import trace_tiny

    # the untrained tiny model is unconfident: open the filters so updates show in the trace
    trace = trace_tiny("deyo", "tiny-bn", cifar_c_root, tmp_path, ent_threshold=10.0, plpd_threshold=-1.0)
    assert trace["meta"]["method"] == "deyo"
    assert set(DeYO.default_params(context())) <= set(trace["meta"]["method_params"])
    adapt = [i for i, p in enumerate(trace["phase"]) if p == "adapt"]
    assert len(adapt) == 4 and all(trace["updated"][i] for i in adapt)
