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
#: What ``norm_profile`` reports: one family, none at all, or several families in one network.
PROFILE_NAMES = {**{k: v for k, v in NORM_NAMES.items() if k}, "none": "no normalisation layers", "mixed": "mixed normalisation"}

#: Each built-in model's normalisation family, known without building it, so a refusal can
#: name the models a method does run on. ``models.get_model`` checks the built network agrees.
MODEL_NORMS: dict[str, str] = {
    "demo-resnet": "bn",
    "demo-resnet-gn": "gn",
    "resnet18": "bn",
    "resnet50": "bn",
    "vit_base_patch16_224": "ln",
    "cifar-resnet18": "bn",
    "mobilenet_v2": "bn",
    "mobilenet_v3_small": "bn",
    "resnet50_gn": "gn",
}


def norm_kind(model: nn.Module) -> str | None:
    """The normalisation family a model is built on (``bn`` > ``gn`` > ``ln``), or None."""
    kinds = norm_kinds(model)
    for k in NORM_KINDS:
        if k in kinds:
            return k
    return None


def norm_kinds(model: nn.Module) -> frozenset[str]:
    """Every normalisation family present in ``model`` (empty: none)."""
    kinds = set()
    for m in model.modules():
        if isinstance(m, BN_TYPES):
            kinds.add("bn")
        elif isinstance(m, nn.GroupNorm):
            kinds.add("gn")
        elif isinstance(m, nn.LayerNorm):
            kinds.add("ln")
    return frozenset(kinds)


def norm_profile(kinds: Iterable[str]) -> str:
    """``bn``/``gn``/``ln`` for a network built on one family, ``none`` or ``mixed``."""
    kinds = set(kinds)
    if not kinds:
        return "none"
    return next(iter(kinds)) if len(kinds) == 1 else "mixed"


def describe_norms(kinds: Iterable[str]) -> str:
    """``BatchNorm``, ``no normalisation layers`` or ``mixed normalisation (BatchNorm + LayerNorm)``."""
    kinds = sorted(kinds, key=NORM_KINDS.index)
    profile = norm_profile(kinds)
    if profile == "mixed":
        return f"{PROFILE_NAMES['mixed']} ({' + '.join(NORM_NAMES[k] for k in kinds)})"
    return PROFILE_NAMES[profile]


def method_fits(method, kinds: Iterable[str]) -> bool:
    """Whether ``method`` (a TTA method class) runs on a network with these normalisation
    families: a method that adapts no normalisation layer (``norm_free``) runs on any network;
    any other needs at least one family, and must handle every family present, so a mixed
    network never has some of its normalisation layers adapted and others silently left alone."""
    kinds = frozenset(kinds)
    if getattr(method, "norm_free", False):
        return True
    return bool(kinds) and kinds <= frozenset(method.compatible_norms)


def compatible_models(norms: Iterable[str]) -> list[str]:
    """Built-in models whose normalisation family is in ``norms``."""
    wanted = set(norms)
    return [name for name, norm in MODEL_NORMS.items() if norm in wanted]
