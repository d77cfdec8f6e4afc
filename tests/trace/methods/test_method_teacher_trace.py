"""CoTTA and RoTTA end to end through the real tracer (``trace_run``) on tiny CIFAR-C data, with
and without a sparse-adaptation policy: schema-valid traces, their published defaults in the
metadata, an update on every adapted event, and none (with ℓ = 0) on the events a policy skips."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import tempora_schema as schema
from tempora_trace.config import TraceConfig
from tempora_trace.methods import builtin_methods
from tempora_trace.runner import trace_run

pytestmark = pytest.mark.usefixtures("tiny_models")


def test_both_are_built_in():
    assert {"cotta", "rotta"} <= set(builtin_methods())


@pytest.mark.parametrize("method", ["cotta", "rotta"])
@pytest.mark.parametrize("policy", [None, "every:2"])
def test_traces_end_to_end(cifar_c_root, tmp_path, method, policy):
    cfg = TraceConfig(
        method=method,
        policy=policy,
        dataset="cifar10-c",
        model="tiny-bn",
        data_root=str(cifar_c_root),
        domains=["gaussian_noise"],
        batch_size=8,
        out=str(tmp_path),
        quiet=True,
        frozen_sample=2,
        warmup_batches=1,
        # small enough for the suite; the defaults are recorded either way
        method_params={"n_augmentations": 2} if method == "cotta" else {"memory_size": 8, "update_frequency": 8},
    )
    path = trace_run(cfg)
    table = pq.read_table(path)
    meta = schema.decode_metadata(table.schema, path)
    schema.validate_table(table, meta, path)
    assert meta["method"] == method
    params = meta["method_params"]
    if method == "cotta":
        assert params["teacher_momentum"] == 0.999 and params["augment"] == "always" and params["n_augmentations"] == 2
    else:
        assert params["nu"] == 0.001 and params["rbn_momentum"] == 0.05 and params["memory_size"] == 8
    d = table.to_pydict()
    adapt = [i for i, p in enumerate(d["phase"]) if p == "adapt"]
    assert len(adapt) == 4
    adapted = [j % 2 == 0 if policy else True for j in range(len(adapt))]
    assert [d["updated"][i] for i in adapt] == adapted
    assert all(d["l_ms"][i] == 0.0 for i, a in zip(adapt, adapted) if not a)
