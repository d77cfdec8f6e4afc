"""Tiny images in folder layouts and a tiny model file, for the bring-your-own tests: a
trace on them takes a few seconds on one CPU thread."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

#: A user's model file: factories with and without ``num_classes``, without normalisation
#: layers, with two normalisation families, and two that do not build a model.
FACTORIES = """
import torch
import torch.nn as nn


def build(num_classes=10):
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, num_classes)
    )


def build_three():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.GroupNorm(2, 4), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))


def build_plain(num_classes=10):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, num_classes))


def build_mixed(num_classes=10):
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.LayerNorm(4), nn.Linear(4, num_classes)
    )


def not_a_model(num_classes=10):
    return {"weights": 1}


def raises(num_classes=10):
    raise RuntimeError("the factory broke")


TABLE = 3
"""


def write_model_file(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(FACTORIES)
    return path


def write_image_folder(
    root: Path,
    domains: Sequence[str] | None = ("day", "night"),
    classes: Sequence[str] = ("cat", "dog", "fox"),
    per_class: int = 8,
    size: tuple[int, int] = (20, 24),
    seed: int = 0,
) -> Path:
    """``root/<domain>/<class>/<i>.png`` (or ``root/<class>/<i>.png`` when ``domains`` is
    None): random images tinted by class, so they differ per class and per file."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for domain in domains if domains is not None else [None]:
        for k, cls in enumerate(classes):
            folder = root / cls if domain is None else root / domain / cls
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                img = rng.integers(0, 128, (*size, 3)) + np.array([60 * k, 30 * k, 0])
                Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(folder / f"{i:03d}.png")
    return root
