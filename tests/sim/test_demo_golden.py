"""A fixed set of traces sweeps and reports to the same numbers as before any restructuring.

``tests/golden/demo-traces`` is the demo set as the first tracer wrote it (schema v2 without
timing-variability metadata, two traces at a time): the golden test's frozen input, and the
proof that traces written before the timing measurement existed still read, sweep and report.
``tests/golden/demo`` holds what ``tempora-sim sweep tests/golden/demo-traces --protocol all``
(default grids) and ``tempora-sim report`` of that sweep wrote before the code was reorganised:
the sweep's Parquet and every report table (CSV, stored as Parquet). A refactor, a new protocol,
a new method source or a new trace column may add columns or rows; it may not change a number
that was there. To accept an intended change, regenerate the files with the two commands above
and say why in the commit.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from tempora_sim.commands.main import main

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "demo"
DEMO = ROOT / "tests" / "golden" / "demo-traces"


def _same_rows(new: pl.DataFrame, old: pl.DataFrame, what: str) -> None:
    """Every column the golden frame has, with the same values row for row (new columns allowed)."""
    missing = [c for c in old.columns if c not in new.columns]
    assert not missing, f"{what}: columns gone: {missing}"
    new = new.select(old.columns)
    assert new.height == old.height, f"{what}: {new.height} rows, golden {old.height}"
    new, old = new.sort(old.columns, nulls_last=True), old.sort(old.columns, nulls_last=True)
    assert_frame_equal(new, old, check_dtypes=False, rel_tol=1e-12, abs_tol=1e-12)


@pytest.fixture(scope="module")
def demo_outputs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("golden")
    runner = CliRunner()
    res = runner.invoke(main, ["sweep", str(DEMO), "--protocol", "all", "--out", str(out / "sweep")])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["report", str(out / "sweep"), "--out", str(out / "report"), "--no-figures"])
    assert res.exit_code == 0, res.output
    return out


def test_report_without_figures_draws_none(demo_outputs):
    """The golden tables come from a report drawn without figures (``--no-figures``): the same
    numbers as the report that drew them when the golden files were written."""
    assert not (demo_outputs / "report" / "figures").exists()
    assert "![" not in (demo_outputs / "report" / "report.md").read_text(encoding="utf-8")


def test_sweep_of_the_demo_traces_is_unchanged(demo_outputs):
    _same_rows(pl.read_parquet(demo_outputs / "sweep" / "utility.parquet"), pl.read_parquet(GOLDEN / "utility.parquet"), "sweep")


@pytest.mark.parametrize("golden", sorted(GOLDEN.glob("report-*.parquet")), ids=lambda p: p.stem.removeprefix("report-"))
def test_report_tables_of_the_demo_traces_are_unchanged(demo_outputs, golden):
    table = demo_outputs / "report" / "tables" / (golden.stem.removeprefix("report-") + ".csv")
    assert table.is_file(), f"report no longer writes {table.name}"
    _same_rows(pl.read_csv(table, infer_schema_length=None), pl.read_parquet(golden), table.name)
