"""CIFAR-10-C / CIFAR-100-C (``<root>/<corruption>.npy`` + ``labels.npy``) and clean CIFAR.

The corruption files of Hendrycks & Dietterich (2019) stack the five severities of the 10,000
test images: uint8 ``(5·M, 32, 32, 3)``, severity s in rows ``(s−1)·M … s·M−1``. ``labels.npy``
holds either the 5·M labels (the official files) or the M labels once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ..errors import DataError


def to_float_nchw(images: np.ndarray) -> torch.Tensor:
    """uint8 NHWC → float32 NCHW in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float().div_(255.0).contiguous()


class ArraySource:
    """In-memory (or memory-mapped) uint8 NHWC images with int labels."""

    def __init__(self, images: np.ndarray, labels: np.ndarray):
        if images.ndim != 4 or images.shape[-1] != 3 or len(images) != len(labels):
            raise DataError(f"image array of shape {images.shape} does not match {len(labels)} labels (want N×H×W×3)")
        self.images = images
        self.labels = np.asarray(labels, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.labels)

    def get_batch(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        idx = np.asarray(indices, dtype=np.int64)
        return to_float_nchw(self.images[idx]), torch.from_numpy(self.labels[idx].copy())


def open_cifar_c(root: Path, corruption: str, severity: int) -> ArraySource:
    """The ``severity`` slice of ``<root>/<corruption>.npy``, memory-mapped."""
    data_path, labels_path = root / f"{corruption}.npy", root / "labels.npy"
    for p in (data_path, labels_path):
        if not p.is_file():
            raise DataError(f"missing {p} (CIFAR-C layout: <root>/<corruption>.npy and <root>/labels.npy)")
    if not 1 <= severity <= 5:
        raise DataError(f"severity must be 1..5, not {severity}")
    try:
        data = np.load(data_path, mmap_mode="r")
        labels = np.load(labels_path)
    except ValueError as exc:
        raise DataError(f"cannot read {data_path}: {exc}") from None
    if data.ndim != 4 or data.shape[0] % 5 != 0:
        raise DataError(f"{data_path} has shape {data.shape}; expected (5·M, H, W, 3) with the five severities stacked")
    per = data.shape[0] // 5
    if len(labels) == 5 * per:
        labels = labels[(severity - 1) * per : severity * per]
    elif len(labels) != per:
        raise DataError(f"{labels_path} has {len(labels)} labels; expected {per} or {5 * per} for {data_path.name}")
    return ArraySource(data[(severity - 1) * per : severity * per], labels)


def open_cifar_clean(root: Path, num_classes: int) -> ArraySource:
    """The clean CIFAR test set from torchvision's extracted folder under ``root`` or its parent."""
    from torchvision.datasets import CIFAR10, CIFAR100  # lazy: importing torchvision costs a process about 1.5 s (it loads torch._dynamo)

    cls, folder = (CIFAR100, "cifar-100-python") if num_classes == 100 else (CIFAR10, "cifar-10-batches-py")
    for base in (root, root.parent):
        if (base / folder).is_dir():
            ds = cls(str(base), train=False, download=False)
            return ArraySource(np.asarray(ds.data), np.asarray(ds.targets))
    raise DataError(f"domain 'clean' needs torchvision's extracted {folder}/ in {root} or {root.parent}")
