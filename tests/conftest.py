"""Shared fixtures: tiny CIFAR-C-layout data and a tiny BN network, so tracer tests run in
seconds on one CPU thread."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

# The suite never reaches for the network: a missing weights file is the offline refusal
# (tests/trace/models/test_weights_download.py covers downloads with a local stand-in for the server).
os.environ["TEMPORA_OFFLINE"] = "1"


_CACHE_BEFORE = os.environ.get("TEMPORA_TRACE_CACHE")


def pytest_configure(config):
    """The simulator's trace cache (tempora_sim.trace_cache) of this test run lives in a
    temporary folder, never in the user's cache; subprocesses inherit it."""
    import tempfile

    config._tempora_trace_cache = tempfile.mkdtemp(prefix="tempora-trace-cache-")
    os.environ["TEMPORA_TRACE_CACHE"] = config._tempora_trace_cache


def pytest_unconfigure(config):
    import shutil

    shutil.rmtree(getattr(config, "_tempora_trace_cache", ""), ignore_errors=True)
    if _CACHE_BEFORE is None:
        os.environ.pop("TEMPORA_TRACE_CACHE", None)
    else:
        os.environ["TEMPORA_TRACE_CACHE"] = _CACHE_BEFORE


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


@pytest.fixture
def cifar_c_root(tmp_path: Path) -> Path:
    """Two corruptions, 32 images per severity (4 batches of 8)."""
    return write_cifar_c(tmp_path / "cifar-c", ["gaussian_noise", "fog"])


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


@pytest.fixture(autouse=False)
def one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _tiny_net(norm: str, num_classes: int):
    import torch.nn as nn

    layer = nn.BatchNorm2d(8) if norm == "bn" else nn.GroupNorm(2, 8)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), layer, nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, num_classes))


@pytest.fixture
def tiny_models(monkeypatch):
    """Registers ``tiny-bn`` and ``tiny-gn`` (one conv + norm + linear, cifar family) in the
    tracer's model registry for the duration of a test; weights are random but seeded."""
    import torch

    from tempora_trace import models

    def builder(norm):
        def build(weights, num_classes):
            torch.manual_seed(0)
            classes = num_classes or 10
            return _tiny_net(norm, classes), models.ModelSpec(f"tiny-{norm}", norm, classes, 32, "cifar")

        return build

    monkeypatch.setitem(models.MODELS, "tiny-bn", builder("bn"))
    monkeypatch.setitem(models.MODELS, "tiny-gn", builder("gn"))
    return ["tiny-bn", "tiny-gn"]
