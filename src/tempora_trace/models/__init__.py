"""Model registry: every model takes float CHW input in [0, 1] and normalises internally.

``get_model(name, weights=None, num_classes=None, offline=None) -> (nn.Module, ModelSpec)``.
Weights come from ``weights`` (a file path, or ``"random"`` for an untrained model, useful only
for timing), else from where their publisher's library keeps them (torch hub's checkpoint
folder, the Hugging Face cache; downloaded there when missing unless downloads are off: see
:mod:`.pretrained`), ``$TEMPORA_HOME/weights`` (CIFAR) or the committed demo weights.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn
from safetensors.torch import load_file

import tempora_schema as schema

from ..errors import ConfigError, WeightsError
from ..norms import MODEL_NORMS, compatible_models, norm_kind, norm_kinds, norm_profile
from ..paths import tempora_home
from .cifar_resnet import build_cifar_resnet18
from .demo import build_demo_resnet
from .external import SHORT_NAMES, Preprocess, build_external, is_external, model_label, parse_spec
from .heads import FeatureHead, feature_head
from .pretrained import fetch_hf, fetch_torchvision, offline_mode, timm_pretrained_cfg, torchvision_weights

# Tempora's own CIFAR ResNet-18 normalises with the CIFAR training-set statistics. The
# ImageNet models take theirs from the weights' publisher (torchvision enum, timm config).
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2471, 0.2435, 0.2616)
CIFAR100_MEAN = (0.5071, 0.4867, 0.4408)
CIFAR100_STD = (0.2675, 0.2565, 0.2761)

WEIGHTS_DIR = Path(__file__).parent / "weights"
#: timm's default ``vit_base_patch16_224`` weights (augreg2, in21k → in1k), the paper's ViT-B/16.
VIT_PRETRAINED = "vit_base_patch16_224.augreg2_in21k_ft_in1k"


@dataclass(frozen=True)
class ModelSpec:
    """What the tracer and methods need to know about a model."""

    name: str
    norm: str  # bn | gn | ln (the family methods adapt; none: the network has none)
    num_classes: int
    input_size: int  # square side in pixels
    family: str  # imagenet | cifar (the dataset family it was trained on)
    #: the weights file loaded, or None for random weights (its hash is part of the trace identity)
    weights_file: str | None = None
    #: how an image file becomes this model's input (models by spec; None: the dataset's own)
    preprocess: "Preprocess | None" = None
    #: where the model came from (library and version, factory file and its hash …): metadata
    source: dict | None = None
    #: weights identity when no file was loaded but the weights are not random (a factory's
    #: own parameters: the hash of their state); None: from ``weights_file``
    weights_id: str | None = None
    #: every normalisation family in the network (``norm`` is the one methods adapt)
    norms: frozenset = frozenset()

    @property
    def weights_identity(self) -> str:
        """``random`` or ``sha256:<hex>``: what the trace identity records for the weights."""
        return self.weights_id if self.weights_id is not None else schema.weights_identity(self.weights_file)

    @property
    def norm_profile(self) -> str:
        """``bn`` / ``gn`` / ``ln`` / ``none`` / ``mixed`` (see :func:`tempora_trace.norms.norm_profile`)."""
        return norm_profile(self.norms)


class Normalized(nn.Module):
    """Wraps a network that expects normalised input so callers can feed [0, 1] tensors.

    The constants are non-persistent buffers: they move with ``.to(device)`` but stay out of
    ``state_dict`` so snapshots and weight files only hold the network's own state.
    """

    def __init__(self, net: nn.Module, mean: tuple[float, ...], std: tuple[float, ...]):
        super().__init__()
        self.net = net
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.mean) / self.std)


def _load_state(path: Path) -> dict:
    """Read a state_dict from .pt/.pth/.bin or .safetensors; unwrap common checkpoint shapes."""
    if not path.is_file():
        raise WeightsError(f"weights file not found: {path}")
    try:
        if path.suffix == ".safetensors":
            state = load_file(str(path))
        else:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # corrupt or foreign file: say which one
        raise WeightsError(f"cannot read weights file {path}: {type(exc).__name__}: {exc}".splitlines()[0]) from None
    if isinstance(state, dict):
        for key in ("state_dict", "model", "model_state_dict"):
            if key in state and isinstance(state[key], dict):
                state = state[key]
                break
        state = {(k[7:] if k.startswith("module.") else k): v for k, v in state.items()}
    if not isinstance(state, dict):
        raise WeightsError(f"weights file {path} does not hold a state_dict")
    return state


def _load_into(net: nn.Module, path: Path, name: str) -> None:
    state = _load_state(path)
    try:
        net.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise WeightsError(f"weights file {path} does not fit model '{name}': {first}") from None


def _resolve(weights: str | os.PathLike | None, default: Callable[[], Path]) -> Path | None:
    """The weight file to load: an explicit path, else ``default()`` (which finds, fetches or
    refuses); ``None`` means random initialisation."""
    if weights is not None and str(weights) == "random":
        return None
    if weights is not None:
        path = Path(weights).expanduser()
        if not path.is_file():
            raise WeightsError(f"weights file not found: {path}")
        return path
    return default()


def _existing(path: Path, hint: str) -> Callable[[], Path]:
    def find() -> Path:
        if path.is_file():
            return path
        raise WeightsError(hint)

    return find


def _file(path: Path | None) -> str | None:
    return None if path is None else str(path)


# ------------------------------------------------------------------------ builders
def _torchvision_resnet(arch: str, weights, num_classes: int | None):
    from torchvision import models as tvm  # lazy: importing torchvision costs a process about 1.5 s (it loads torch._dynamo)

    classes = num_classes or 1000
    path = _resolve(weights, lambda: fetch_torchvision(arch))
    net = getattr(tvm, arch)(weights=None, num_classes=classes)
    if path is not None:
        _load_into(net, path, arch)
    preprocess = torchvision_weights(arch).transforms()
    return (Normalized(net, tuple(preprocess.mean), tuple(preprocess.std)), ModelSpec(arch, "bn", classes, 224, "imagenet", _file(path)))


def _vit(weights, num_classes: int | None):
    try:
        import timm  # optional stack, loaded only for the ViT
    except ImportError:
        raise WeightsError("model 'vit_base_patch16_224' needs the 'timm' package (pip install 'tempora-tta[trace]')") from None
    classes = num_classes or 1000
    cfg = timm_pretrained_cfg(VIT_PRETRAINED)
    path = _resolve(weights, lambda: fetch_hf(cfg.hf_hub_id, "model.safetensors", "vit_base_patch16_224"))
    net = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=classes)
    if path is not None:
        _load_into(net, path, "vit_base_patch16_224")
    size = cfg.input_size[-1]
    return (
        Normalized(net, tuple(cfg.mean), tuple(cfg.std)),
        ModelSpec("vit_base_patch16_224", "ln", classes, size, "imagenet", _file(path)),
    )


def _cifar_resnet18(weights, num_classes: int | None):
    classes = num_classes or 10
    fname = f"cifar{classes}-resnet18.pt"
    default = tempora_home() / "weights" / fname
    hint = (
        f"no weights for 'cifar-resnet18' ({classes} classes): put a torchvision-keyed state_dict at "
        f"{default} or pass --weights FILE (no public download exists; see the CIFAR-10-C section of docs/guide/datasets.md)"
    )
    path = _resolve(weights, _existing(default, hint))
    net = build_cifar_resnet18(classes)
    if path is not None:
        _load_into(net, path, "cifar-resnet18")
    mean, std = (CIFAR100_MEAN, CIFAR100_STD) if classes == 100 else (CIFAR10_MEAN, CIFAR10_STD)
    return Normalized(net, mean, std), ModelSpec("cifar-resnet18", "bn", classes, 32, "cifar", _file(path))


def _demo(norm: str):
    def build(weights, num_classes: int | None):
        name = "demo-resnet" if norm == "bn" else "demo-resnet-gn"
        classes = num_classes or 10
        default = WEIGHTS_DIR / f"{name}.pt"
        hint = f"no weights for '{name}': expected {default} (run `make demo-models`) or pass --weights FILE"
        path = _resolve(weights, _existing(default, hint))
        net = build_demo_resnet(norm=norm, num_classes=classes)
        if path is not None:
            _load_into(net, path, name)
        return net, ModelSpec(name, norm, classes, 32, "cifar", _file(path))

    return build


def _short(name: str, weights, num_classes: int | None):
    return build_external(name, weights, num_classes, None)


MODELS: dict[str, Callable] = {
    "demo-resnet": _demo("bn"),
    "demo-resnet-gn": _demo("gn"),
    "resnet18": lambda w, c: _torchvision_resnet("resnet18", w, c),
    "resnet50": lambda w, c: _torchvision_resnet("resnet50", w, c),
    "vit_base_patch16_224": _vit,
    "cifar-resnet18": _cifar_resnet18,
    # the paper's reference code runs these too; built from their library (models.external)
    **{short: functools.partial(_short, short) for short in SHORT_NAMES},
}


def available_models() -> list[str]:
    return list(MODELS)


def get_model(
    name: str,
    weights: str | os.PathLike | None = None,
    num_classes: int | None = None,
    offline: bool | None = None,
    input_size: int | None = None,
) -> tuple[nn.Module, ModelSpec]:
    """Build model ``name`` in eval mode on CPU with its weights loaded (see module doc).
    ``name`` is a built-in name or a spec (``timm:NAME``, ``torchvision:NAME[:WEIGHTS]``,
    ``MODULE:FACTORY``, ``PATH.py:FACTORY``: :mod:`.external`). ``offline``: never download
    (default: ``TEMPORA_OFFLINE`` / ``HF_HUB_OFFLINE``); ``input_size``: image side of a
    model by spec (default: what its library or the model says, else 224)."""
    if name in MODELS and name not in SHORT_NAMES:
        if input_size is not None:
            raise ConfigError(f"--input-size is for models by spec (timm:, torchvision:, your own factory); '{name}' takes its own")
        build = lambda: MODELS[name](weights, num_classes)  # noqa: E731
    elif is_external(name):
        build = lambda: build_external(name, weights, num_classes, input_size)  # noqa: E731
    else:
        raise ConfigError(
            f"unknown model '{name}'; available: {', '.join(MODELS)}, or timm:NAME, torchvision:NAME[:WEIGHTS], "
            "MODULE:FACTORY, PATH.py:FACTORY"
        )
    with offline_mode(offline):
        net, spec = build()
    net.eval()
    kinds = norm_kinds(net)
    found = norm_kind(net)
    spec = dataclasses.replace(spec, norms=kinds, norm=found or "none")  # none: a network without normalisation layers
    return net, spec


def model_norms(name: str, input_size: int | None = None) -> frozenset[str]:
    """The normalisation families of model ``name``: a built-in's from :data:`MODEL_NORMS`
    (nothing built), a model by spec's by building it untrained (nothing downloaded)."""
    if name in MODEL_NORMS:
        return frozenset({MODEL_NORMS[name]})
    _, spec = get_model(name, "random", input_size=input_size)
    return spec.norms


__all__ = [
    "MODEL_NORMS",
    "FeatureHead",
    "ModelSpec",
    "Normalized",
    "Preprocess",
    "available_models",
    "compatible_models",
    "feature_head",
    "get_model",
    "model_label",
    "model_norms",
    "parse_spec",
    "tempora_home",
]
