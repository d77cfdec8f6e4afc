"""docs/add-a-method.md works as written: its example method, executed from the page, registers,
passes the method contract, and traces two batches of the demo data through the real tracer
under both profiles."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

import tempora_schema as schema
from methods_helpers import batches, check_frozen_changes_nothing, check_reset_bit_identical, check_snapshot_restore, context, tiny_model
from tempora_trace import methods as registry
from tempora_trace.config import TraceConfig
from tempora_trace.runner import trace_run

pytestmark = pytest.mark.usefixtures("one_thread")

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "add-a-method.md"


@pytest.fixture
def guide_method(monkeypatch):
    """Execute the guide's first Python block; the registry is restored afterwards."""
    registry._discover()  # first, so the built-in methods land in the real registry
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    code = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)[0]
    namespace: dict = {"__name__": "guide_example"}
    exec(compile(code, str(GUIDE), "exec"), namespace)
    return namespace["PseudoLabel"]


@pytest.fixture
def small_demo_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.getbasetemp() / "tempora-home-demo"
    monkeypatch.setenv("TEMPORA_HOME", str(home))
    monkeypatch.setenv("TEMPORA_DEMO_TEST_SIZE", "64")
    return home


def test_guide_method_registers_and_keeps_the_contract(guide_method):
    assert registry.get_method("pseudo-label") is guide_method
    assert "pseudo-label" in registry.available_methods()
    make = lambda: guide_method(tiny_model("bn"), context())  # noqa: E731
    check_reset_bit_identical(make(), batches())
    check_snapshot_restore(make(), batches())
    check_frozen_changes_nothing(make(), batches())
    method = make()
    before = {n: p.detach().clone() for n, p in method.adapted}
    method.predict(batches(1)[0])
    method.adapt()
    assert method.last_updated
    assert any(not torch.equal(before[n], p) for n, p in method.adapted)
    assert [n for n, _ in method.adapted] == ["layer1.1.weight", "layer1.1.bias", "layer2.1.weight", "layer2.1.bias"]
    nothing = guide_method(tiny_model("bn"), context(), e_margin=0.0)
    nothing.predict(batches(1)[0])
    nothing.adapt()
    assert nothing.last_updated is False


@pytest.mark.parametrize("profile", ["default", "paper"])
def test_guide_method_traces_two_demo_batches(guide_method, small_demo_home, tmp_path, profile):
    cfg = TraceConfig(
        method="pseudo-label",
        dataset="demo",
        model="demo-resnet",
        domains=["gaussian_noise"],
        max_batches=2,
        batch_size=16,
        out=str(tmp_path),
        quiet=True,
        frozen_sample=1,
        warmup_batches=1,
        method_params={"profile": profile, "lr": 0.001},
    )
    path = trace_run(cfg)
    table = pq.read_table(path)
    meta = schema.decode_metadata(table.schema, path)
    schema.validate_table(table, meta, path)
    assert meta["method"] == "pseudo-label"
    assert meta["method_params"]["profile"] == profile and meta["method_params"]["lr"] == 0.001
    d = table.to_pydict()
    adapt = [i for i, p in enumerate(d["phase"]) if p == "adapt"]
    assert len(adapt) == 2 and all(d["l_ms"][i] > 0 for i in adapt)
