"""Shared checks of the method contract (docs/design/design.md §2, §5) for the per-method test files.

Every TTA method must honour the same promises to the tracer, whatever its algorithm:

- ``reset()`` returns to the source state: replaying a stream after a reset gives
  bit-identical predictions to the first pass;
- ``snapshot()``/``restore()`` let the tracer evaluate a frozen copy and continue adapting on a
  bit-identical path;
- frozen mode changes no parameter, buffer or method-owned state;
- gradient-free methods never call ``backward`` and do no tensor work after the prediction
  (their extrinsic time ℓ is ≈ 0 by construction).

The checks themselves live in the shipped conformance kit (:mod:`tempora_trace.methods.testing`,
which ``tempora-trace check-method`` runs on any method); this module re-exports them beside the
tiny models and oracles of the per-method tests (``from helpers.methods import ...``). The
tiny models here keep each check to milliseconds on one CPU thread.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn as nn

from tempora_trace.methods import MethodContext, TTAMethod
from tempora_trace.methods.testing import (  # noqa: F401  (re-exported for the per-method tests)
    assert_outputs_equal,
    assert_same_state,
    check_frozen_changes_nothing,
    check_gradient_free,
    check_hparams,
    check_reset_bit_identical,
    check_snapshot_restore,
    check_updated_flag,
    forbid_backward,
    run_stream,
    state_of,
    torch_calls,
)

torch.set_num_threads(1)


# ---------------------------------------------------------------------- tiny models
class TinyCNN(nn.Module):
    """conv-norm-ReLU ×2 (as two "stages" named like a ResNet's), global pool, linear head.

    Takes float CHW images in [0, 1] like every Tempora model. ``norm`` picks BatchNorm,
    GroupNorm or LayerNorm-over-channels (via GroupNorm with one group is *not* LayerNorm, so
    ``ln`` uses a real ``nn.LayerNorm`` on the pooled features instead)."""

    def __init__(self, norm: str = "bn", num_classes: int = 10, width: int = 8):
        super().__init__()

        def norm_layer(c: int) -> nn.Module:
            if norm == "bn":
                return nn.BatchNorm2d(c)
            if norm == "gn":
                return nn.GroupNorm(2, c)
            return nn.Identity()

        self.layer1 = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False), norm_layer(width), nn.ReLU())
        self.layer2 = nn.Sequential(nn.Conv2d(width, 2 * width, 3, padding=1, stride=2, bias=False), norm_layer(2 * width), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.norm = nn.LayerNorm(2 * width) if norm == "ln" else nn.Identity()
        self.fc = nn.Linear(2 * width, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        h = self.layer2(self.layer1(x - 0.5))
        return self.norm(self.pool(h).flatten(1))

    def features_and_classifier(self):
        """The declared head (tempora_trace.models.feature_head) that feature-level methods use."""
        return self.features, self.fc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


def tiny_model(norm: str = "bn", num_classes: int = 10, seed: int = 0, logit_scale: float = 30.0) -> nn.Module:
    """A deterministic TinyCNN whose BN buffers hold non-trivial "source" statistics (as a
    trained model's would), so keeping vs discarding them is observable. The head is scaled by
    ``logit_scale`` so that, like a trained network, most predictions are confident enough to
    pass entropy filters (0.4·ln C) on random inputs."""
    torch.manual_seed(seed)
    model = TinyCNN(norm, num_classes)
    with torch.no_grad():
        model.fc.weight.mul_(logit_scale)
        model.fc.bias.mul_(logit_scale)
    if norm == "bn":
        model.train()
        with torch.no_grad():
            for _ in range(5):
                model(torch.rand(32, 3, 8, 8))
    model.eval()
    return model


class LogitsProbe(nn.Module):
    """logits = x · γ + β with the affine parameters of a LayerNorm (γ = 1, β = 0 at start): a
    test chooses every sample's logits exactly (the input *is* the logits) while entropy-based
    methods still have normalisation parameters to adapt. Inputs are ``[N, num_classes]``."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.norm.weight + self.norm.bias


def confident_logits(cls: int, n: int, strength: float = 8.0, num_classes: int = 10) -> torch.Tensor:
    """``n`` logit rows peaked on class ``cls`` (tiny distinct offsets keep rows distinct)."""
    x = torch.zeros(n, num_classes)
    x[:, cls] = strength
    return x + 0.01 * torch.arange(n * num_classes, dtype=torch.float32).reshape(n, num_classes) / (n * num_classes)


def source_images(n: int, batch_size: int, size: int = 8):
    """A context's ``source_images``: ``n`` reproducible random 8-px images in [0, 1] (the
    clean split a method such as EATA reads at construction), in batches of ``batch_size``."""
    g = torch.Generator().manual_seed(7)
    yield from torch.rand(min(n, 32), 3, size, size, generator=g).split(max(1, batch_size))


def context(num_classes: int = 10, family: str = "cifar", norm: str = "bn", batch_size: int = 16) -> MethodContext:
    return MethodContext(num_classes=num_classes, dataset_family=family, batch_size=batch_size, norm_kind=norm, source_images=source_images)


def batches(n: int = 4, batch_size: int = 16, size: int = 8, seed: int = 1) -> list[torch.Tensor]:
    """``n`` reproducible random image batches in [0, 1]."""
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(batch_size, 3, size, size, generator=g) for _ in range(n)]


# ---------------------------------------------------------------------- helpers of the per-method tests
def adapt_with_input_grad(method: TTAMethod, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """predict + adapt with the input as a leaf tensor, so its gradient shows which samples the
    method learnt from; returns (prediction, input gradient, zeros if none)."""
    x = x.clone().requires_grad_(True)
    out = method.predict(x)
    method.adapt()
    return out, (x.grad if x.grad is not None else torch.zeros_like(x))


def rows_with_gradient(grad: torch.Tensor) -> list[int]:
    return [i for i in range(grad.size(0)) if grad[i].abs().sum() > 0]


def changed_parameters(model_before: dict[str, torch.Tensor], model: nn.Module) -> set[str]:
    """Names of the parameters (not buffers) whose values differ from ``model_before``."""
    return {n for n, p in model.named_parameters() if not torch.equal(p.detach(), model_before[n])}


# ---------------------------------------------------------------------- demo data and models
@functools.lru_cache(maxsize=4)
def demo_corrupted_stream(
    corruption: str = "gaussian_noise", severity: int = 5, n_batches: int = 20, batch_size: int = 64
) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """The first ``n_batches · batch_size`` demo test images with ``corruption`` applied, as
    (float [0, 1] NCHW images, labels) batches; generated in memory (a few seconds), cached."""
    from tempora_trace.data.demo import corrupt_images, generate_clean

    clean, labels = generate_clean("test", n_batches * batch_size, workers=1)
    images = corrupt_images(clean, corruption, severity, workers=1)
    from tempora_trace.data.cifar import to_float_nchw

    x = to_float_nchw(images)  # dense NCHW, as the tracer's loaders give it
    y = torch.from_numpy(labels)
    return tuple(zip(x.split(batch_size), y.split(batch_size)))


def demo_method(name: str, model_name: str = "demo-resnet", **params: Any) -> TTAMethod:
    """Method ``name`` around a fresh copy of a committed demo model."""
    from tempora_trace.methods import get_method
    from tempora_trace.models import get_model

    model, spec = get_model(model_name)
    ctx = MethodContext(num_classes=spec.num_classes, dataset_family=spec.family, batch_size=64, model_name=model_name, norm_kind=spec.norm)
    return get_method(name)(model, ctx, **params)


def stream_accuracy(method: TTAMethod, stream) -> float:
    """Accuracy (%) of the predictions served over the stream, predict-then-adapt per batch."""
    correct = total = 0
    for x, y in stream:
        correct += int((method.predict(x).argmax(1) == y).sum())
        total += len(y)
        method.adapt()
    return 100.0 * correct / total
