"""The conformance kit's stream: the demo batches and models it plays, and how it drives a method.

:func:`demo_batches` corrupts generated images as the demo dataset does (small, generated
offline, the same on every run); :func:`demo_model` builds (and caches) a small network with
the normalisation a method needs; :func:`run_stream` plays a method over batches as the tracer
does, and the ``assert_*`` helpers compare what two runs produced.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.nn as nn

from ..data.cifar import to_float_nchw
from ..data.demo import corrupt_images, generate_clean
from ..models import get_model
from .base import MethodError, TTAMethod


# ---------------------------------------------------------------------- demo data and models
@functools.lru_cache(maxsize=4)
def _demo_clean(n: int) -> torch.Tensor:
    return to_float_nchw(generate_clean("test", n, workers=1)[0])


def demo_source_images(available: int) -> Callable[[int, int], Iterator[torch.Tensor]]:
    """The kit's :attr:`MethodContext.source_images`: a clean split of ``available`` demo test
    images (the clean originals of the kit's stream), so a method that reads source samples
    at construction (EATA's Fisher term) builds in a fraction of a second on every check."""

    def source_images(n: int, batch_size: int) -> Iterator[torch.Tensor]:
        x = _demo_clean(available)[: max(0, int(n))]
        yield from x.split(max(1, int(batch_size)))

    return source_images


@functools.lru_cache(maxsize=4)
def _demo_arrays(n: int, corruption: str, severity: int) -> tuple[Any, Any]:
    clean, labels = generate_clean("test", n, workers=1)
    images = corrupt_images(clean, corruption, severity, workers=1)
    return to_float_nchw(images), torch.from_numpy(labels)


def demo_batches(
    n_batches: int = 6, batch_size: int = 16, corruption: str = "gaussian_noise", severity: int = 5, device: str = "cpu"
) -> list[torch.Tensor]:
    """The first ``n_batches · batch_size`` demo test images with ``corruption`` applied, as
    float [0, 1] NCHW batches (generated in memory, no files; cached per process)."""
    x, _ = _demo_arrays(n_batches * batch_size, corruption, severity)
    return [b.to(device) for b in x.split(batch_size)]


#: The demo model per normalisation family (LayerNorm: the kit's own small network).
DEMO_MODELS = {"bn": "demo-resnet", "gn": "demo-resnet-gn", "ln": "tiny-layernorm"}


class TinyLayerNormNet(nn.Module):
    """A small patch-MLP classifier with LayerNorm (for methods that need LayerNorm layers;
    no demo model has them): 4×4 patches embedded, two LayerNorm-MLP blocks over the tokens,
    mean-pooled, a linear head. Random weights (seeded): conformance needs no accuracy."""

    def __init__(self, num_classes: int = 10, dim: int = 32, patch: int = 4):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Conv2d(3, dim, patch, patch)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim)) for _ in range(2)
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x - 0.5).flatten(2).transpose(1, 2)
        for block in self.blocks:
            h = h + block(h)
        return self.norm(h).mean(1)

    def features_and_classifier(self):
        """Its head, declared for feature-level methods (tempora_trace.models.feature_head)."""
        return self.features, self.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


@functools.lru_cache(maxsize=3)
def _demo_model_cached(norm: str) -> nn.Module:
    if norm == "ln":
        return TinyLayerNormNet().eval()
    model, _ = get_model(DEMO_MODELS[norm])
    return model.eval()


def demo_model(norm: str = "bn", device: str = "cpu") -> nn.Module:
    """A fresh copy of the demo model of normalisation family ``norm`` (``bn``, ``gn``, ``ln``)."""
    return copy.deepcopy(_demo_model_cached(norm)).to(device)


def _pick_norm(cls: type[TTAMethod]) -> str:
    for norm in ("bn", "gn", "ln"):
        if norm in cls.compatible_norms:
            return norm
    raise MethodError(f"method '{cls.name}' declares no normalisation family it runs on (compatible_norms is empty)")


# ---------------------------------------------------------------------- stream driver
def run_stream(method: TTAMethod, xs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """What the tracer does per batch: ``predict`` then ``adapt``; returns the outputs."""
    outs = []
    for x in xs:
        out = method.predict(x)
        _require(isinstance(out, torch.Tensor), f"{method.name}.predict returned {type(out).__name__}, not a tensor")
        _require(not out.requires_grad, f"{method.name}.predict returned a tensor attached to the graph (return logits.detach())")
        outs.append(out.clone())
        method.adapt()
    return outs


def state_of(method: TTAMethod) -> dict[str, Any]:
    """Every parameter, buffer and method-owned state, deep-copied for comparison."""
    return {
        "model": {k: v.detach().clone() for k, v in method.model.state_dict().items()},
        "extra": copy.deepcopy(method.extra_state()),
    }


def assert_same_state(a: Any, b: Any, path: str = "") -> None:
    """Recursive bit-equality of nested dicts/lists/tensors/scalars."""
    if isinstance(a, torch.Tensor):
        _require(isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b), f"state differs at {path or '<root>'}")
    elif isinstance(a, dict):
        _require(isinstance(b, dict) and a.keys() == b.keys(), f"state keys differ at {path or '<root>'}")
        for k in a:
            assert_same_state(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        _require(isinstance(b, (list, tuple)) and len(a) == len(b), f"state length differs at {path}")
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{path}[{i}]")
    else:
        _require(a == b, f"state differs at {path}: {a!r} != {b!r}")


def assert_outputs_equal(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> None:
    _require(len(a) == len(b), f"{len(a)} outputs against {len(b)}")
    for i, (x, y) in enumerate(zip(a, b)):
        _require(x.shape == y.shape, f"batch {i}: output shapes differ ({tuple(x.shape)} vs {tuple(y.shape)})")
        _require(torch.equal(x, y), f"batch {i}: outputs differ (max |Δ| = {(x - y).abs().max().item():.3g})")


def _require(condition: Any, message: str) -> None:
    if not condition:
        raise AssertionError(message)
