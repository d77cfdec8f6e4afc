"""zoo1's methods end to end through the real tracer (``trace_run``) on tiny CIFAR-C data:
every method writes a schema-valid trace with its hyperparameters in the metadata, and the
prediction boundary shows in the timing columns (gradient-free: ℓ ≈ 0; "updated" only where
the batch changed state later predictions use: never for LAME, every batch for NEO's running mean)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import tempora_schema as schema
from tempora_trace.config import TraceConfig
from tempora_trace.errors import ConfigError
from tempora_trace.methods import get_method
from tempora_trace.runner import trace_run

pytestmark = pytest.mark.usefixtures("tiny_models")

ZOO1 = ["lame", "neo", "eta", "eta-no-reset", "shot-im", "shot-norm", "sar"]


@pytest.mark.parametrize("method", ZOO1)
def test_method_traces_end_to_end(cifar_c_root, tmp_path, method):
    cfg = TraceConfig(
        method=method,
        dataset="cifar10-c",
        model="tiny-bn",
        data_root=str(cifar_c_root),
        domains=["gaussian_noise"],
        batch_size=8,
        out=str(tmp_path),
        quiet=True,
        frozen_sample=2,
        warmup_batches=1,
    )
    path = trace_run(cfg)
    table = pq.read_table(path)
    meta = schema.decode_metadata(table.schema, path)
    schema.validate_table(table, meta, path)
    assert meta["method"] == method
    defaults = get_method(method).default_params(_ctx())
    assert set(defaults) <= set(meta["method_params"])
    d = table.to_pydict()
    adapt = [i for i, p in enumerate(d["phase"]) if p == "adapt"]
    assert len(adapt) == 4
    if get_method(method).family == "gradient-free":
        assert [d["updated"][i] for i in adapt] == [method == "neo"] * len(adapt)
        assert max(d["l_ms"][i] for i in adapt) < 0.5 * min(d["e_ms"][i] for i in adapt)
    if method in ("shot-im", "shot-norm"):  # no filter: every batch is learnt from
        assert all(d["updated"][i] for i in adapt)


def _ctx():
    from tempora_trace.methods import MethodContext

    return MethodContext(num_classes=10, dataset_family="cifar", batch_size=8, norm_kind="bn")


@pytest.mark.parametrize("method", ["eta-no-reset", "shot-norm"])
def test_bn_variants_are_refused_on_groupnorm(cifar_c_root, tmp_path, method):
    cfg = TraceConfig(
        method=method,
        dataset="cifar10-c",
        model="tiny-gn",
        data_root=str(cifar_c_root),
        domains=["gaussian_noise"],
        batch_size=8,
        out=str(tmp_path),
        quiet=True,
    )
    with pytest.raises(ConfigError, match=method):
        trace_run(cfg)
