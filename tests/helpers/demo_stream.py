"""A short corrupted demo stream and stream-accuracy helper for the "adaptation beats
standard inference" checks of DeYO, CMF, SPA and ZeroSIAM.

The stream is the demo set's first ``batches × batch_size`` test images of one corruption, in
order (no shuffling), generated into a private ``TEMPORA_HOME`` with a test split just large
enough for it, so the check costs a few seconds on one CPU thread.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from tempora_trace.data.cifar import to_float_nchw
from tempora_trace.data.demo import ensure_demo_corrupted
from tempora_trace.methods import MethodContext, get_method
from tempora_trace.models import get_model


@contextmanager
def _env(**values: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@lru_cache(maxsize=None)
def _private_home() -> Path:
    home = Path(tempfile.mkdtemp(prefix="tempora-zoo2-"))
    atexit.register(shutil.rmtree, home, True)
    return home


@lru_cache(maxsize=4)
def demo_stream(corruption: str, severity: int, batches: int, batch_size: int = 64) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``batches`` (images in [0, 1], labels) pairs of the corrupted demo test split; generated
    once per test run."""
    n = batches * batch_size
    with _env(TEMPORA_HOME=str(_private_home() / f"n{n}"), TEMPORA_DEMO_TEST_SIZE=str(n)):
        root = ensure_demo_corrupted(corruption, severity, workers=1)
    labels = np.load(root / "labels.npy")
    images = np.load(root / f"{corruption}.npy", mmap_mode="r")
    rows = slice((severity - 1) * n, severity * n)
    x = to_float_nchw(np.array(images[rows]))  # dense NCHW, as the tracer's loaders give it
    y = torch.from_numpy(np.array(labels[rows]))
    return list(zip(x.split(batch_size), y.split(batch_size)))


@lru_cache(maxsize=None)
def stream_accuracy(method_name: str, model_name: str, corruption: str, severity: int, batches: int, seed: int = 0) -> float:
    """Online accuracy of ``method_name`` on ``model_name`` (committed weights) over the first
    ``batches`` batches of 64 of a corruption, predict-then-adapt per batch as the tracer runs it
    (cached: the ``standard`` baseline is shared by the tests)."""
    stream = demo_stream(corruption, severity, batches)
    torch.manual_seed(seed)
    model, spec = get_model(model_name)
    context = MethodContext(
        num_classes=spec.num_classes, dataset_family=spec.family, batch_size=len(stream[0][1]), model_name=model_name, norm_kind=spec.norm
    )
    method = get_method(method_name)(model, context)
    correct = total = 0
    for x, y in stream:
        logits = method.predict(x)
        method.adapt()
        correct += int((logits.argmax(1) == y).sum())
        total += len(y)
    return correct / total


def trace_tiny(method: str, model: str, data_root: Path, out: Path, **method_params) -> dict:
    """Run the real tracer (``trace_run``) for ``method`` on the conftest's tiny CIFAR-C data
    and model, validate the trace against the schema and return its columns and metadata.
    The idle blocks have no run-in (``idle_settle=0``): its length is a property of the machine,
    checked in tests/trace/test_trace_variability.py; here it would only cost seconds."""
    import pyarrow.parquet as pq

    import tempora_schema as schema
    from tempora_trace.config import TraceConfig
    from tempora_trace.runner import trace_run

    cfg = TraceConfig(
        method=method,
        method_params=method_params,
        dataset="cifar10-c",
        model=model,
        data_root=str(data_root),
        domains=["gaussian_noise"],
        batch_size=8,
        out=str(out),
        quiet=True,
        frozen_sample=2,
        warmup_batches=1,
        idle_settle=0.0,
    )
    path = trace_run(cfg)
    table = pq.read_table(path)
    meta = schema.decode_metadata(table.schema, path)
    schema.validate_table(table, meta, path)
    return {"meta": meta, **table.to_pydict()}


def check_layernorm_method_traces(method: str, method_cls, data_root: Path, out: Path) -> None:
    """A method made for normalisation without batch statistics (SPA, ZeroSIAM): the real
    tracer records its default parameters and adapts on tiny-gn, and refuses tiny-bn."""
    import pytest

    from helpers.methods import context
    from tempora_trace.errors import ConfigError

    trace = trace_tiny(method, "tiny-gn", data_root, out)
    assert set(method_cls.default_params(context(norm="gn"))) <= set(trace["meta"]["method_params"])
    adapt = [i for i, p in enumerate(trace["phase"]) if p == "adapt"]
    assert len(adapt) == 4 and any(trace["updated"][i] for i in adapt)
    with pytest.raises(ConfigError, match=method):
        trace_tiny(method, "tiny-bn", data_root, out)
