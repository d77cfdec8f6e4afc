"""docs/guide/add-a-method.md works as written: its example method is the one the example package in
examples/ ships; saved as a file from the page, it passes the method contract and traces two
batches of the demo data through the real tracer as ``PATH.py:CLASS`` under both profiles."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

import tempora_schema as schema
from helpers.methods import batches, check_frozen_changes_nothing, check_reset_bit_identical, check_snapshot_restore, context, tiny_model
from tempora_trace import methods as registry
from tempora_trace.config import TraceConfig
from tempora_trace.runner import trace_run

ROOT = Path(__file__).resolve().parents[3]
GUIDE = ROOT / "docs" / "guide" / "add-a-method.md"
EXAMPLE = ROOT / "examples" / "tempora-example-method" / "src" / "tempora_example_method" / "pseudo_label.py"


def guide_code() -> str:
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)[0]


@pytest.fixture
def guide_file(tmp_path):
    """The guide's first Python block saved as ``my_method.py``, as the page says."""
    path = tmp_path / "my_method.py"
    path.write_text(guide_code(), encoding="utf-8")
    return path


@pytest.fixture
def guide_method(guide_file):
    return registry.resolve_method(f"{guide_file}:PseudoLabel").cls


def test_the_guide_shows_the_example_packages_method():
    example = EXAMPLE.read_text(encoding="utf-8")
    body = guide_code().split("class PseudoLabel", 1)[1]
    assert "class PseudoLabel" + body in example
    for line in guide_code().splitlines():
        if line.startswith(("import", "from")):
            assert line in example


@pytest.fixture
def small_demo_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.getbasetemp() / "tempora-home-demo"
    monkeypatch.setenv("TEMPORA_HOME", str(home))
    monkeypatch.setenv("TEMPORA_DEMO_TEST_SIZE", "64")
    return home


def test_guide_method_resolves_and_keeps_the_contract(guide_method, guide_file):
    ref = registry.resolve_method(f"{guide_file}:PseudoLabel")
    assert ref.cls is guide_method and ref.name == "pseudo-label" and ref.source.kind == "file"
    assert "pseudo-label" not in registry.available_methods()  # a spec registers nothing
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
def test_guide_method_traces_two_demo_batches(guide_file, small_demo_home, tmp_path, profile):
    cfg = TraceConfig(
        method=f"{guide_file}:PseudoLabel",
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
    assert meta["method"] == "pseudo-label" and meta["method_source"]["path"] == str(guide_file.resolve())
    assert meta["method_params"]["profile"] == profile and meta["method_params"]["lr"] == 0.001
    d = table.to_pydict()
    adapt = [i for i, p in enumerate(d["phase"]) if p == "adapt"]
    assert len(adapt) == 2 and all(d["l_ms"][i] > 0 for i in adapt)
