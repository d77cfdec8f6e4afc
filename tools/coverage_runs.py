"""Pool the timing coverage of several ``make validate`` runs into one Markdown table.

Each run writes ``<out>/report/validation.csv`` (one row per setting, with the coverage columns
of :mod:`tempora_sim.coverage`). This script adds the runs up per setting (method, protocol and
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

KEYS = ["method", "protocol", "rho", "budget_ms"]


def load(runs: list[Path]) -> pl.DataFrame:
    """Every run's settings with a ``run_index`` column (1, 2, …)."""
    frames = []
    for i, run in enumerate(runs, 1):
        path = run / "report" / "validation.csv" if run.is_dir() else run
        if not path.is_file():
            raise SystemExit(f"coverage_runs: {path}: no such file (a make validate output folder or its validation.csv)")
        frames.append(pl.read_csv(path, infer_schema_length=None).with_columns(pl.lit(i).alias("run_index")))
    return pl.concat(frames, how="diagonal_relaxed").filter(pl.col("timing_uncertainty") == "measured")


def per_setting(s: pl.DataFrame) -> pl.DataFrame:
    """One row per setting, the runs added up."""
    return (
        s.group_by(KEYS, maintain_order=True)
        .agg(
            pl.col("runs").sum().alias("live_runs"),
            pl.col("covered_alpha").sum().alias("covered_alpha"),
            pl.col("covered_alpha").is_not_null().any().alias("has_alpha"),
            pl.col("covered_utility").sum().alias("covered_utility"),
            pl.col("width_alpha_pp").median().alias("width_alpha_pp"),
            pl.col("width_utility_pp").median().alias("width_utility_pp"),
        )
        .with_columns(
            pl.when(pl.col("has_alpha")).then(100.0 * pl.col("covered_alpha") / pl.col("live_runs")).alias("alpha_pct"),
            (100.0 * pl.col("covered_utility") / pl.col("live_runs")).alias("utility_pct"),
        )
    )


def summary(t: pl.DataFrame) -> dict:
    a = t.filter(pl.col("has_alpha"))
    return {
        "settings": t.height,
        "alpha": (int(a["covered_alpha"].sum()), int(a["live_runs"].sum())),
        "utility": (int(t["covered_utility"].sum()), int(t["live_runs"].sum())),
        "lowest_alpha": a["alpha_pct"].min() if a.height else None,
        "lowest_utility": t["utility_pct"].min(),
        "width_alpha": a["width_alpha_pp"].median() if a.height else None,
        "width_utility": t["width_utility_pp"].median(),
    }


def _frac(pair: tuple[int, int]) -> str:
    return f"{pair[0]}/{pair[1]} = {100 * pair[0] / pair[1]:.1f} %" if pair[1] else "–"


def _num(x, unit: str = "") -> str:
    return "–" if x is None else f"{x:.1f}{unit}"


def markdown(runs: list[Path]) -> str:
    s = load(runs)
    t = per_setting(s)
    lines = [
        "| method | setting | live runs | α inside | U inside | median width α / U (pp) |",
        "|---|---|---|---|---|---|",
    ]
    for r in t.iter_rows(named=True):
        setting = f"ρ = {100 * r['rho']:.0f} %" if r["protocol"] == "discrete" else f"B = {r['budget_ms']:.0f} ms"
        a = _frac((r["covered_alpha"], r["live_runs"])) if r["has_alpha"] else "–"
        lines.append(
            f"| {r['method']} | {setting} | {r['live_runs']} | {a} | {_frac((r['covered_utility'], r['live_runs']))} | "
            f"{_num(r['width_alpha_pp'])} / {_num(r['width_utility_pp'])} |"
        )
    width = pl.col("width_utility_pp").fill_null(0.0) + pl.col("width_alpha_pp").fill_null(0.0)
    for label, part in (("every setting", t), ("settings whose interval has a width", t.filter(width > 0))):
        if not part.height:
            lines.append(f"\n{label}: none")
            continue
        x = summary(part)
        lines.append(
            f"\n{label} ({x['settings']} settings, {len(runs)} runs): α {_frac(x['alpha'])} (lowest setting {_num(x['lowest_alpha'], ' %')}, "
            f"median width {_num(x['width_alpha'], ' pp')}); U {_frac(x['utility'])} (lowest setting {_num(x['lowest_utility'], ' %')}, "
            f"median width {_num(x['width_utility'], ' pp')})"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="make validate output folders (VALIDATE_OUT) or their validation.csv")
    print(markdown(p.parse_args(argv).runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
