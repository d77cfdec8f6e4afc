"""Normalisation families: which one a network is built on, their names, and which built-in
models use which.

A leaf module on purpose: the model registry needs ``norm_kind`` to check what it built and
the methods need ``compatible_models`` to word a refusal, so both read it here and neither
imports the other.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch.nn as nn

NORM_KINDS = ("bn", "gn", "ln")
BN_TYPES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
NORM_NAMES = {"bn": "BatchNorm", "gn": "GroupNorm", "ln": "LayerNorm", None: "no normalisation layers"}

#: Each built-in model's normalisation family, known without building it, so a refusal can
#: name the models a method does run on. ``models.get_model`` checks the built network agrees.
MODEL_NORMS: dict[str, str] = {
    "demo-resnet": "bn",
    "demo-resnet-gn": "gn",
    "resnet18": "bn",
    "resnet50": "bn",
    "vit_base_patch16_224": "ln",
    "cifar-resnet18": "bn",
}


def norm_kind(model: nn.Module) -> str | None:
    """The normalisation family a model is built on (``bn`` > ``gn`` > ``ln``), or None."""
    kinds = set()
    for m in model.modules():
        if isinstance(m, BN_TYPES):
            kinds.add("bn")
        elif isinstance(m, nn.GroupNorm):
            kinds.add("gn")
        elif isinstance(m, nn.LayerNorm):
            kinds.add("ln")
    for k in NORM_KINDS:
        if k in kinds:
            return k
    return None


def compatible_models(norms: Iterable[str]) -> list[str]:
    """Built-in models whose normalisation family is in ``norms``."""
    wanted = set(norms)
    return [name for name, norm in MODEL_NORMS.items() if norm in wanted]
