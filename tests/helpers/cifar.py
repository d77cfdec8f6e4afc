"""Tiny CIFAR-10-C data and a tiny network, so tracer tests run in seconds on one CPU thread.

The fixtures that use them (``cifar_c_root``, ``tiny_models``) are in tests/conftest.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_cifar_c(root: Path, corruptions, per_severity: int = 32, size: int = 32, classes: int = 10, seed: int = 0) -> Path:
    """CIFAR-10-C layout: ``<corruption>.npy`` uint8 (5·M, H, W, 3) and ``labels.npy`` (5·M,).

    Images carry a class-dependent colour shift so a model can score above chance."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    labels = rng.integers(0, classes, per_severity)
    np.save(root / "labels.npy", np.tile(labels, 5).astype(np.int64))
    for c in corruptions:
        base = rng.integers(0, 256, (5 * per_severity, size, size, 3))
        shift = (np.tile(labels, 5) * (200 // classes))[:, None, None, None]
        np.save(root / f"{c}.npy", ((base // 2 + shift) % 256).astype(np.uint8))
    return root


def tiny_cifar_args(data_root, out, *extra) -> list:
    """The options of a tiny run on a :func:`write_cifar_c` root (fog, tiny-bn, batches of 8,
    quiet) into ``out``, then ``extra``."""
    return [
        "--dataset",
        "cifar10-c",
        "--model",
        "tiny-bn",
        "--data-root",
        data_root,
        "--domains",
        "fog",
        "--batch-size",
        "8",
        "--out",
        out,
        "--quiet",
        *extra,
    ]


def tiny_config(root, out, **kw):
    """The tracer's configuration of a tiny run (``tent`` on tiny-bn, both corruptions of the
    ``cifar_c_root`` fixture, batches of 8, quiet, idle blocks without their run-in: its length is
    a property of the machine, checked on its own) into ``out``; ``kw`` overrides any field."""
    from tempora_trace.config import TraceConfig

    base = dict(
        method="tent",
        dataset="cifar10-c",
        model="tiny-bn",
        data_root=str(root),
        domains=["gaussian_noise", "fog"],
        batch_size=8,
        out=str(out),
        quiet=True,
        idle_settle=0.0,
    )
    base.update(kw)
    return TraceConfig(**base)


def tiny_net(norm: str, num_classes: int):
    """One conv, a BatchNorm (``norm="bn"``) or GroupNorm layer, ReLU, pooling and a linear head."""
    import torch.nn as nn

    layer = nn.BatchNorm2d(8) if norm == "bn" else nn.GroupNorm(2, 8)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), layer, nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, num_classes))
