"""Model registry: every model takes float CHW input in [0, 1] and normalises internally.

``get_model(name, weights=None, num_classes=None) -> (nn.Module, ModelSpec)``. Weights come
from ``weights`` (a file path, or ``"random"`` for an untrained model, useful only for timing),
else from the user's torch hub / Hugging Face cache or the committed demo weights. Nothing is
ever downloaded: a missing file raises :class:`WeightsError` naming the file and where to put it.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn

from ..errors import ConfigError, WeightsError
from ..methods.base import norm_kind

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2471, 0.2435, 0.2616)
CIFAR100_MEAN = (0.5071, 0.4867, 0.4408)
CIFAR100_STD = (0.2675, 0.2565, 0.2761)
#: timm's default ``vit_base_patch16_224`` weights (augreg2, in21k → in1k) normalise to [-1, 1].
VIT_MEAN = (0.5, 0.5, 0.5)
VIT_STD = (0.5, 0.5, 0.5)

WEIGHTS_DIR = Path(__file__).parent / "weights"
#: torchvision ImageNet weights the paper's ResNets use (IMAGENET1K_V1) and their hub file names.
TORCHVISION_FILES = {"resnet18": "resnet18-f37072fd.pth", "resnet50": "resnet50-0676ba61.pth"}
VIT_HF_REPO = "timm/vit_base_patch16_224.augreg2_in21k_ft_in1k"


@dataclass(frozen=True)
class ModelSpec:
    """What the tracer and methods need to know about a model."""

    name: str
    norm: str  # bn | gn | ln
    num_classes: int
    input_size: int  # square side in pixels
    family: str  # imagenet | cifar (the dataset family it was trained on)
    #: the weights file loaded, or None for random weights (its hash is part of the trace identity)
    weights_file: str | None = None


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


def _torch_hub_checkpoints() -> Path:
    return Path(torch.hub.get_dir()) / "checkpoints"


def tempora_home() -> Path:
    return Path(os.environ.get("TEMPORA_HOME", Path.home() / ".cache" / "tempora")).expanduser()


def _load_state(path: Path) -> dict:
    """Read a state_dict from .pt/.pth/.bin or .safetensors; unwrap common checkpoint shapes."""
    if not path.is_file():
        raise WeightsError(f"weights file not found: {path}")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

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


def _resolve(weights: str | os.PathLike | None, default: Path | None, hint: str) -> Path | None:
    """The weight file to load: explicit path, else the default location; ``None`` = random."""
    if weights is not None and str(weights) == "random":
        return None
    if weights is not None:
        path = Path(weights).expanduser()
        if not path.is_file():
            raise WeightsError(f"weights file not found: {path}")
        return path
    if default is not None and default.is_file():
        return default
    raise WeightsError(hint)


def _file(path: Path | None) -> str | None:
    return None if path is None else str(path)


# ------------------------------------------------------------------------ builders
def _torchvision_resnet(arch: str, weights, num_classes: int | None):
    from torchvision import models as tvm

    classes = num_classes or 1000
    default = _torch_hub_checkpoints() / TORCHVISION_FILES[arch]
    hint = (
        f"no weights for '{arch}': put torchvision's IMAGENET1K_V1 file {TORCHVISION_FILES[arch]} in "
        f"{default.parent}/ (from https://download.pytorch.org/models/{TORCHVISION_FILES[arch]}) or pass --weights FILE"
    )
    path = _resolve(weights, default, hint)
    net = getattr(tvm, arch)(weights=None, num_classes=classes)
    if path is not None:
        _load_into(net, path, arch)
    return Normalized(net, IMAGENET_MEAN, IMAGENET_STD), ModelSpec(arch, "bn", classes, 224, "imagenet", _file(path))


def _hf_cached_file(repo: str, filename: str) -> Path | None:
    """A file from the Hugging Face cache, found without any network access."""
    hub = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub")
    snapshots = hub / ("models--" + repo.replace("/", "--")) / "snapshots"
    if snapshots.is_dir():
        for snap in sorted(snapshots.iterdir()):
            candidate = snap / filename
            if candidate.is_file():
                return candidate
    return None


def _vit(weights, num_classes: int | None):
    try:
        import timm
    except ImportError:
        raise WeightsError("model 'vit_base_patch16_224' needs the 'timm' package (pip install timm)") from None
    classes = num_classes or 1000
    default = _hf_cached_file(VIT_HF_REPO, "model.safetensors")
    hint = (
        "no weights for 'vit_base_patch16_224': put model.safetensors of the Hugging Face repo "
        f"{VIT_HF_REPO} in your HF cache (huggingface-cli download {VIT_HF_REPO}) or pass --weights FILE"
    )
    path = _resolve(weights, default, hint)
    net = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=classes)
    if path is not None:
        _load_into(net, path, "vit_base_patch16_224")
    return Normalized(net, VIT_MEAN, VIT_STD), ModelSpec("vit_base_patch16_224", "ln", classes, 224, "imagenet", _file(path))


def _cifar_resnet18(weights, num_classes: int | None):
    from .cifar_resnet import build_cifar_resnet18

    classes = num_classes or 10
    fname = f"cifar{classes}-resnet18.pt"
    default = tempora_home() / "weights" / fname
    hint = (
        f"no weights for 'cifar-resnet18' ({classes} classes): put a torchvision-keyed state_dict at "
        f"{default} or pass --weights FILE (see README, tracer: CIFAR-10-C)"
    )
    path = _resolve(weights, default, hint)
    net = build_cifar_resnet18(classes)
    if path is not None:
        _load_into(net, path, "cifar-resnet18")
    mean, std = (CIFAR100_MEAN, CIFAR100_STD) if classes == 100 else (CIFAR10_MEAN, CIFAR10_STD)
    return Normalized(net, mean, std), ModelSpec("cifar-resnet18", "bn", classes, 32, "cifar", _file(path))


def _demo(norm: str):
    def build(weights, num_classes: int | None):
        from .demo import build_demo_resnet  # owned by the demo helper; imported lazily

        name = "demo-resnet" if norm == "bn" else "demo-resnet-gn"
        classes = num_classes or 10
        default = WEIGHTS_DIR / f"{name}.pt"
        hint = f"no weights for '{name}': expected {default} (run `make demo-models`) or pass --weights FILE"
        path = _resolve(weights, default, hint)
        net = build_demo_resnet(norm=norm, num_classes=classes)
        if path is not None:
            _load_into(net, path, name)
        return net, ModelSpec(name, norm, classes, 32, "cifar", _file(path))

    return build


MODELS: dict[str, Callable] = {
    "demo-resnet": _demo("bn"),
    "demo-resnet-gn": _demo("gn"),
    "resnet18": lambda w, c: _torchvision_resnet("resnet18", w, c),
    "resnet50": lambda w, c: _torchvision_resnet("resnet50", w, c),
    "vit_base_patch16_224": _vit,
    "cifar-resnet18": _cifar_resnet18,
}


#: Each built-in model's normalisation family, known without building it, so a refusal can
#: name the models a method does run on. ``get_model`` checks the built network agrees.
MODEL_NORMS: dict[str, str] = {
    "demo-resnet": "bn",
    "demo-resnet-gn": "gn",
    "resnet18": "bn",
    "resnet50": "bn",
    "vit_base_patch16_224": "ln",
    "cifar-resnet18": "bn",
}


def available_models() -> list[str]:
    return list(MODELS)


def compatible_models(norms) -> list[str]:
    """Built-in models whose normalisation family is in ``norms``."""
    return [name for name, norm in MODEL_NORMS.items() if norm in norms]


def get_model(name: str, weights: str | os.PathLike | None = None, num_classes: int | None = None) -> tuple[nn.Module, ModelSpec]:
    """Build model ``name`` in eval mode on CPU with its weights loaded (see module doc)."""
    if name not in MODELS:
        raise ConfigError(f"unknown model '{name}'; available: {', '.join(MODELS)}")
    net, spec = MODELS[name](weights, num_classes)
    net.eval()
    found = norm_kind(net)
    if found is not None and found != spec.norm:
        spec = dataclasses.replace(spec, norm=found)
    return net, spec


__all__ = ["ModelSpec", "Normalized", "available_models", "get_model", "tempora_home"]
