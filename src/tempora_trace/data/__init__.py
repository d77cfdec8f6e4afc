"""Dataset registry: names, label spaces, default models, domains and where the files live.

``get_dataset(name)`` returns a :class:`DatasetSpec`; ``spec.open(domain, severity, root)``
returns a :class:`~tempora_trace.data.streams.Domain`. The ``demo`` dataset is generated on
first use by :mod:`tempora_trace.data.demo` in exact CIFAR-10-C layout and read with the
CIFAR-C loader, so it exercises the same code path as the real data.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tempora_schema import DEFAULT_SEVERITY

from ..errors import ConfigError, DataError
from .cifar import open_cifar_c, open_cifar_clean
from .imagenet import open_imagenet_c, open_imagenet_clean, open_imagenet_variant
from .streams import CORRUPTIONS, Domain, Episode, batch_order, expand_domains


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    #: ``cifar`` | ``imagenet``: the switch methods use for dataset-dependent defaults.
    family: str
    #: size of the label space predictions are scored over (200 for ImageNet-R/-A).
    num_classes: int
    #: logits the model must produce.
    model_classes: int
    default_model: str
    domains: tuple[str, ...]
    default_domains: tuple[str, ...]
    has_severity: bool
    #: folder name under ``$TEMPORA_DATA`` when ``--data-root`` is not given (None: no files needed).
    data_folder: str | None
    opener: Callable[["DatasetSpec", Path | None, str, int | None], Domain]
    layout: str

    def root(self, data_root: str | os.PathLike | None) -> Path | None:
        """Where the files are: ``--data-root``, else ``$TEMPORA_DATA/<folder>``."""
        if self.data_folder is None:
            return None
        if data_root is not None:
            path = Path(data_root).expanduser()
        elif os.environ.get("TEMPORA_DATA"):
            path = Path(os.environ["TEMPORA_DATA"]).expanduser() / self.data_folder
        else:
            raise DataError(f"dataset '{self.name}' needs --data-root DIR (layout: {self.layout}) or $TEMPORA_DATA/{self.data_folder}")
        if not path.is_dir():
            raise DataError(f"dataset '{self.name}': data root {path} is not a directory (layout: {self.layout})")
        return path

    def open(self, domain: str, severity: int | None, root: Path | None) -> Domain:
        if domain not in self.domains:
            raise ConfigError(f"dataset '{self.name}' has no domain '{domain}'")
        return self.opener(self, root, domain, severity if self.has_severity and domain != "clean" else None)


def _open_demo(spec: DatasetSpec, root: Path | None, domain: str, severity: int | None) -> Domain:
    from . import demo  # imported lazily: only the demo needs it

    if domain == "clean":
        images, labels = demo.ensure_demo_clean(split="test")
        from .cifar import ArraySource

        return Domain("clean", None, ArraySource(images, labels))
    folder = Path(demo.ensure_demo_corrupted(domain, severity))
    return Domain(domain, severity, open_cifar_c(folder, domain, severity))


def _open_cifar(spec: DatasetSpec, root: Path | None, domain: str, severity: int | None) -> Domain:
    assert root is not None
    if domain == "clean":
        return Domain("clean", None, open_cifar_clean(root, spec.num_classes))
    return Domain(domain, severity, open_cifar_c(root, domain, severity))


def _open_imagenet_c(spec: DatasetSpec, root: Path | None, domain: str, severity: int | None) -> Domain:
    assert root is not None
    if domain == "clean":
        return Domain("clean", None, open_imagenet_clean(root))
    return Domain(domain, severity, open_imagenet_c(root, domain, severity))


def _open_variant(spec: DatasetSpec, root: Path | None, domain: str, severity: int | None) -> Domain:
    assert root is not None
    source, mask = open_imagenet_variant(root, spec.name)
    return Domain(spec.name, None, source, mask)


_C_DOMAINS = tuple(CORRUPTIONS) + ("clean",)
_CIFAR_LAYOUT = "<root>/<corruption>.npy (5 severities × M images, uint8 N×32×32×3) and <root>/labels.npy"

DATASETS: dict[str, DatasetSpec] = {
    "demo": DatasetSpec(
        "demo",
        "cifar",
        10,
        10,
        "demo-resnet",
        _C_DOMAINS,
        tuple(CORRUPTIONS),
        True,
        None,
        _open_demo,
        "generated in $TEMPORA_HOME on first use",
    ),
    "cifar10-c": DatasetSpec(
        "cifar10-c", "cifar", 10, 10, "cifar-resnet18", _C_DOMAINS, tuple(CORRUPTIONS), True, "CIFAR-10-C", _open_cifar, _CIFAR_LAYOUT
    ),
    "cifar100-c": DatasetSpec(
        "cifar100-c", "cifar", 100, 100, "cifar-resnet18", _C_DOMAINS, tuple(CORRUPTIONS), True, "CIFAR-100-C", _open_cifar, _CIFAR_LAYOUT
    ),
    "imagenet-c": DatasetSpec(
        "imagenet-c",
        "imagenet",
        1000,
        1000,
        "resnet50",
        _C_DOMAINS,
        tuple(CORRUPTIONS),
        True,
        "ImageNet-C",
        _open_imagenet_c,
        "<root>/<corruption>/<severity>/<wnid>/*.JPEG",
    ),
    "imagenet-r": DatasetSpec(
        "imagenet-r",
        "imagenet",
        200,
        1000,
        "resnet50",
        ("imagenet-r",),
        ("imagenet-r",),
        False,
        "imagenet-r",
        _open_variant,
        "<root>/<wnid>/*.jpg (200 classes)",
    ),
    "imagenet-a": DatasetSpec(
        "imagenet-a",
        "imagenet",
        200,
        1000,
        "resnet50",
        ("imagenet-a",),
        ("imagenet-a",),
        False,
        "imagenet-a",
        _open_variant,
        "<root>/<wnid>/*.JPEG (200 classes)",
    ),
    "imagenet-v2": DatasetSpec(
        "imagenet-v2",
        "imagenet",
        1000,
        1000,
        "resnet50",
        ("imagenet-v2",),
        ("imagenet-v2",),
        False,
        "imagenetv2-matched-frequency-format-val",
        _open_variant,
        "<root>/<class index 0..999>/*.jpeg",
    ),
}


def get_dataset(name: str) -> DatasetSpec:
    if name not in DATASETS:
        raise ConfigError(f"unknown dataset '{name}'; available: {', '.join(DATASETS)}")
    return DATASETS[name]


__all__ = [
    "CORRUPTIONS",
    "DATASETS",
    "DEFAULT_SEVERITY",
    "DatasetSpec",
    "Domain",
    "Episode",
    "batch_order",
    "expand_domains",
    "get_dataset",
]
