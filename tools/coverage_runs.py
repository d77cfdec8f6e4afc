"""Pool the timing coverage of several ``make validate`` runs into one Markdown table.

Each run writes ``<out>/report/validation.csv`` (one row per setting, with the coverage columns
of :mod:`tempora_sim.uncertainty.coverage`). This script adds the runs up per setting (method, protocol and
ρ or B): live runs inside the replay's timing interval over live runs, the lowest coverage of
any one run, and the median interval width, then the same overall and over the settings whose
interval has a width. ``docs/`` quotes its output for the runs it reports::

    python tools/coverage_runs.py results/validate-1 results/validate-2 results/validate-3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

from tempora_sim.sweeps.variability import MEASURED
from tempora_sim.uncertainty.coverage import figures, overall

KEYS = ["method", "protocol", "rho", "budget_ms"]


def load(runs: list[Path]) -> pl.DataFrame:
    """Every run's settings with a ``run_index`` column (1, 2, …)."""
    frames = []
    for i, run in enumerate(runs, 1):
        path = run / "report" / "validation.csv" if run.is_dir() else run
        if not path.is_file():
            raise SystemExit(f"coverage_runs: {path}: no such file (a make validate output folder or its validation.csv)")
        frames.append(pl.read_csv(path, infer_schema_length=None).with_columns(pl.lit(i).alias("run_index")))
    return pl.concat(frames, how="diagonal_relaxed").filter(pl.col("timing_uncertainty") == MEASURED)


def per_setting(s: pl.DataFrame) -> pl.DataFrame:
    """One row per setting, the runs added up, in the columns of ``validate``'s settings (so
    :func:`tempora_sim.uncertainty.coverage.overall` summarises them as it summarises one run)."""
    has_alpha = pl.col("covered_alpha").is_not_null().any()
    return (
        s.group_by(KEYS, maintain_order=True)
        .agg(
            pl.col("runs").sum(),
            pl.when(has_alpha).then(pl.col("covered_alpha").sum()).alias("covered_alpha"),
            pl.col("covered_utility").sum(),
            *([pl.col("utility_outside_alpha_inside").sum()] if "utility_outside_alpha_inside" in s.columns else []),
            pl.col("width_alpha_pp").median(),
            pl.col("width_utility_pp").median(),
        )
        .with_columns(
            (100.0 * pl.col("covered_alpha") / pl.col("runs")).alias("coverage_alpha_pct"),
            (100.0 * pl.col("covered_utility") / pl.col("runs")).alias("coverage_utility_pct"),
            pl.lit(MEASURED).alias("timing_uncertainty"),
        )
    )


def _frac(covered: int | None, runs: int) -> str:
    return f"{covered}/{runs} = {100 * covered / runs:.1f} %" if covered is not None and runs else "–"


def _num(x, unit: str = "") -> str:
    return "–" if x is None else f"{x:.1f}{unit}"


def _summary_line(label: str, x: dict | None, runs: int) -> str:
    if x is None:
        return f"\n{label}: none"
    return f"\n{label} ({x['settings']} settings, {runs} runs): {figures(x, digits=1)}"


def markdown(runs: list[Path]) -> str:
    t = per_setting(load(runs))
    lines = [
        "| method | setting | live runs | α inside | U inside | median width α / U (pp) |",
        "|---|---|---|---|---|---|",
    ]
    for r in t.iter_rows(named=True):
        setting = f"ρ = {100 * r['rho']:.0f} %" if r["protocol"] == "discrete" else f"B = {r['budget_ms']:.0f} ms"
        lines.append(
            f"| {r['method']} | {setting} | {r['runs']} | {_frac(r['covered_alpha'], r['runs'])} | "
            f"{_frac(r['covered_utility'], r['runs'])} | {_num(r['width_alpha_pp'])} / {_num(r['width_utility_pp'])} |"
        )
    every = overall(t)
    lines.append(_summary_line("every setting", every, len(runs)))
    lines.append(_summary_line("settings whose interval has a width", every["informative"], len(runs)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="make validate output folders (VALIDATE_OUT) or their validation.csv")
    print(markdown(p.parse_args(argv).runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
