"""Dataset registry: names, label spaces, default models, domains and where the files live.

``get_dataset(name)`` returns a :class:`DatasetSpec`; ``spec.open(domain, severity, root)``
returns a :class:`~tempora_trace.data.streams.Domain`. The ``demo`` dataset is generated on
first use by :mod:`tempora_trace.data.demo` in exact CIFAR-10-C layout and read with the
CIFAR-C loader, so it exercises the same code path as the real data.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from tempora_schema import DEFAULT_SEVERITY

from ..errors import ConfigError, DataError
from ..preprocess import default_preprocess
from . import demo
from .cifar import ArraySource, open_cifar_c, open_cifar_clean
from .folder import FolderSource, expand_corruptions, is_folder_spec, read_class_map, scan_folder, tree_stamp
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
    #: a folder of the user's images (``folder:PATH``): decoded the model's way, which
    #: :meth:`bind` sets once the model is built (with the seed of on-the-fly corruptions)
    folder: bool = False
    preprocess: Any = None
    seed: int = 0
    #: logits columns scored (a class map onto a model's own classes), None = all
    class_mask: tuple[int, ...] | None = None
    #: what the trace metadata records about the data (folder path, class map …)
    source: dict | None = None

    def bind(self, preprocess: Any, seed: int) -> "DatasetSpec":
        """This dataset decoding images for a model with ``preprocess`` (folders only)."""
        return dataclasses.replace(self, preprocess=preprocess, seed=seed)

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
    if domain == "clean":
        images, labels = demo.ensure_demo_clean(split="test")
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


def get_dataset(name: str, class_map: str | os.PathLike | None = None, corruptions: Sequence[str] | str | None = None) -> DatasetSpec:
    """The dataset ``name``: a built-in, or ``folder:PATH`` (with ``class_map`` and
    ``corruptions``, which only a folder takes; see :mod:`.folder`)."""
    if is_folder_spec(name):
        if not name[len("folder:") :].strip():
            raise ConfigError(
                "--dataset folder:PATH needs the folder of your images (PATH/<class>/<image> or PATH/<domain>/<class>/<image>)"
            )
        path = Path(name[len("folder:") :]).expanduser()
        fixed = None if corruptions is None else tuple(corruptions) if not isinstance(corruptions, str) else (corruptions,)
        stamp = None  # the class map's size and time: an edited map is read again
        if class_map is not None and Path(class_map).expanduser().is_file():
            st = Path(class_map).expanduser().stat()
            stamp = (st.st_size, st.st_mtime_ns)
        root = str(path.resolve()) if path.exists() else str(path)
        tree = tree_stamp(Path(root)) if Path(root).is_dir() else None  # changed images: scanned and hashed again
        return _folder_dataset(root, None if class_map is None else str(class_map), fixed, stamp, tree)
    if class_map is not None:
        raise ConfigError("--class-map is for --dataset folder:PATH (a built-in dataset has its own classes)")
    if corruptions is not None:
        raise ConfigError("--corruptions is for --dataset folder:PATH (a built-in dataset's domains are chosen with --domains)")
    if name not in DATASETS:
        raise ConfigError(f"unknown dataset '{name}'; available: {', '.join(DATASETS)}, or folder:PATH")
    return DATASETS[name]


@functools.lru_cache(maxsize=16)
def _folder_dataset(
    path: str, class_map: str | None, corruptions: tuple[str, ...] | None, stamp: tuple | None = None, tree: int | None = None
) -> DatasetSpec:
    scan = scan_folder(Path(path))
    digest = hashlib.sha256(scan.fingerprint.encode())
    mask = None
    source: dict[str, Any] = {"kind": "folder", "path": str(scan.root), "classes": len(scan.classes), "content_sha256": scan.fingerprint}
    if class_map is not None:
        mapping = read_class_map(Path(class_map).expanduser(), scan.classes)
        mask = tuple(sorted(set(mapping.values())))
        digest.update(repr(sorted(mapping.items())).encode())
        source["class_map"] = str(Path(class_map).expanduser().resolve())
        source["class_map_sha256"] = hashlib.sha256(Path(class_map).expanduser().read_bytes()).hexdigest()
    if corruptions is not None:
        names = expand_corruptions(corruptions)
        if scan.nested:
            raise ConfigError(
                f"--corruptions needs a folder of clean images in one domain (PATH/<class>/<image>); {scan.root} has domain folders "
                f"({', '.join(scan.domains[:3])}{', …' if len(scan.domains) > 3 else ''})"
            )
        domains = names
    else:
        domains = scan.domains
    name = f"folder:{scan.root.name}@{digest.hexdigest()[:8]}"
    return DatasetSpec(
        name,
        "imagenet",
        len(mask) if mask is not None else len(scan.classes),
        (max(mask) + 1) if mask is not None else len(scan.classes),
        "resnet50",
        tuple(domains),
        tuple(domains),
        corruptions is not None,
        None,
        functools.partial(_open_folder, scan=scan, mapping=None if class_map is None else mapping),
        "PATH/<class>/<image> or PATH/<domain>/<class>/<image>",
        folder=True,
        class_mask=mask,
        source=source,
    )


def _open_folder(spec: DatasetSpec, root: Path | None, domain: str, severity: int | None, *, scan, mapping) -> Domain:
    pre = spec.preprocess if spec.preprocess is not None else default_preprocess(224, "imagenet")
    key = scan.domains[0] if spec.has_severity else domain
    labels = scan.targets[key]
    if mapping is not None:
        position = {v: i for i, v in enumerate(spec.class_mask or ())}
        to_model = np.asarray([position[mapping[c]] for c in scan.classes], dtype=np.int64)
        labels = to_model[labels]
    corruption = domain if spec.has_severity and domain != "clean" else None
    source = FolderSource(scan.files[key], labels, pre, corruption, severity if corruption else None, spec.seed)
    return Domain(domain, severity if corruption else None, source, list(spec.class_mask) if spec.class_mask is not None else None)


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
