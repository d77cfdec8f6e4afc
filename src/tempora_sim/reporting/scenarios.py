"""The report's section on scenarios beyond the paper's three (docs/design/design.md §9).

Rows of the combined protocols (``discrete-continuous``, ``discrete-amortised``) and of the
discrete protocol under non-periodic arrivals are kept apart from the paper's analyses (which
assume periodic arrivals and one pressure at a time) and summarised here:

* bursty vs periodic arrivals at the same mean load: the discrete winner at each ρ under both;
* one 2-D winners map per combined protocol (ρ × T, ρ × B).

``tempora-sim report --scenarios`` replays these from the traces (bursty arrivals over several
seeds, both combined grids); rows of them already in sweep results are reported too.
"""

from __future__ import annotations

import warnings

import polars as pl

from tempora_sim import analyses as an
from tempora_sim import protocols as P
from tempora_sim.engine.grids import RHO
from tempora_sim.sweeps.options import SweepOptions
from tempora_sim.sweeps.replay import SimWarning, sweep

#: ``--scenarios``: the on/off source compared with periodic arrivals, and its seeds.
DEFAULT_BURST = "1,4"
DEFAULT_BURST_SEEDS = 5


def is_scenario(frame: pl.DataFrame) -> pl.Series:
    """Rows that belong to this section rather than to the paper's analyses."""
    combined = frame["protocol"].is_in(list(P.combined()))
    if "arrivals" not in frame.columns:
        return combined
    bursty = frame["protocol"].is_in(_arrival_bound()) & frame["arrivals"].is_not_null() & (frame["arrivals"] != "periodic")
    return combined | bursty


def _arrival_bound() -> list[str]:
    """The single-pressure protocols replayed under an arrival process (discrete)."""
    return [p for p in P.single() if P.get(p).arrival_bound]


def split(frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the paper's rows, the scenario rows)."""
    mask = is_scenario(frame)
    return frame.filter(~mask), frame.filter(mask)


def scenario_sweeps(traces, options, burst: str = DEFAULT_BURST, seeds: int = DEFAULT_BURST_SEEDS) -> pl.DataFrame:
    """The bursty discrete protocol and both combined grids over ``traces``, with the report's
    other sweep options (grids, queue, λ rule …)."""
    base = options if isinstance(options, SweepOptions) else SweepOptions.build(**(options or {}))
    with warnings.catch_warnings():  # the report's own sweep of these traces already said them
        warnings.simplefilter("ignore", SimWarning)
        bursty = sweep(
            traces, SweepOptions.build(base, protocols=",".join(_arrival_bound()), arrivals=f"burst:{burst}", arrival_seeds=seeds)
        )
        combined = sweep(traces, SweepOptions.build(base, protocols=",".join(P.combined()), arrivals="periodic", arrival_seeds=1))
    return pl.concat([bursty, combined], how="diagonal_relaxed")


def _pooled(frame: pl.DataFrame) -> pl.DataFrame:
    rows = frame.filter(pl.col("episode") == an.POOLED)
    return an.pool_seeds(rows) if an.SEED in rows.columns else rows


def best_per_cell(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Per ``keys`` cell: the method with the highest utility (``winner``, ties to the first
    name) and that utility. Shared by the scenario section, the terminal maps and the device
    comparison."""
    ranked = frame.filter(pl.col("utility").is_not_null()).sort(
        keys + ["utility", "method"], descending=[False] * len(keys) + [True, False]
    )
    return ranked.group_by(keys, maintain_order=True).agg(
        pl.col("method").first().alias("winner"), pl.col("utility").first().alias("utility")
    )


def burst_comparison(paper: pl.DataFrame, scen: pl.DataFrame) -> pl.DataFrame | None:
    """Per ρ: the discrete winner under periodic arrivals and under each bursty process."""
    on_rho = P.with_grids((RHO.param,))  # the protocol the arrival process drives
    periodic = _pooled(paper.filter(pl.col("protocol") == on_rho))
    bursty = _pooled(scen.filter(pl.col("protocol") == on_rho))
    if periodic.height == 0 or bursty.height == 0:
        return None
    p = best_per_cell(periodic, ["value"]).rename({"winner": "periodic_winner", "utility": "periodic_utility"})
    rows = []
    for label, part in bursty.group_by("arrivals", maintain_order=True):
        b = best_per_cell(part, ["value"]).rename({"winner": "bursty_winner", "utility": "bursty_utility"})
        rows.append(p.join(b, on="value", how="inner").with_columns(pl.lit(label[0]).alias("arrivals")))
    out = pl.concat(rows).with_columns((pl.col("periodic_winner") != pl.col("bursty_winner")).alias("changed"))
    return out.sort("arrivals", "value", descending=[False, True])


def winners_maps(scen: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """Per combined protocol: the winner of every (ρ, second parameter) cell."""
    out = {}
    pooled = _pooled(scen)
    for protocol in P.combined():
        part = pooled.filter(pl.col("protocol") == protocol)
        if part.height:
            out[protocol] = best_per_cell(part, ["value", "value2"]).sort("value2", "value", descending=[False, True])
    return out


def _rho(v: float) -> str:
    return RHO.label(v)


def markdown(paper: pl.DataFrame, scen: pl.DataFrame, hx: str) -> list[str]:
    """The section for one group (``paper``/``scen`` already filtered to it); [] if no rows."""
    if scen.height == 0:
        return []
    md = [
        f"{hx} Beyond the paper's scenarios",
        "",
        "Replays of the same traces under arrival processes and combined pressures the paper does not evaluate (docs/design/design.md §9).",
        "",
    ]
    comp = burst_comparison(paper, scen)
    if comp is not None:
        changed = comp.filter(pl.col("changed")).height
        md += [
            f"**Bursty vs periodic arrivals at the same mean load** (discrete protocol; bursty rows pool "
            f"{scen['arrival_seed'].drop_nulls().n_unique() if 'arrival_seed' in scen.columns else 1} arrival seeds): "
            f"the winner changes in {changed} of {comp.height} cells.",
            "",
            "| arrivals | ρ | periodic winner (U %) | bursty winner (U %) |",
            "|---|---|---|---|",
        ]
        for r in comp.iter_rows(named=True):
            mark = " ←" if r["changed"] else ""
            md.append(
                f"| {r['arrivals']} | {_rho(r['value'])} | {r['periodic_winner']} "
                f"({r['periodic_utility'] * 100:.1f}) | {r['bursty_winner']} ({r['bursty_utility'] * 100:.1f}){mark} |"
            )
        md.append("")
    for protocol, table in winners_maps(scen).items():
        proto = P.get(protocol)
        title, first, second = proto.heading, proto.grids[0], proto.grids[1]
        rhos = sorted(table["value"].unique().to_list(), reverse=True)
        cells = {(r["value"], r["value2"]): r for r in table.iter_rows(named=True)}
        md += [
            f"**{title}** (`{protocol}`): winner (utility %) of every cell",
            "",
            "| | " + " | ".join(first.label(r) for r in rhos) + " |",
            "|---" * (len(rhos) + 1) + "|",
        ]
        for v2 in sorted(table["value2"].unique().to_list()):
            row = [second.label(v2)]
            for r in rhos:
                hit = cells.get((r, v2))
                row.append("–" if hit is None else f"{hit['winner']} ({hit['utility'] * 100:.1f})")
            md.append("| " + " | ".join(row) + " |")
        md.append("")
    return md
