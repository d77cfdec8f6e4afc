"""The one registry of report tables: each table's ``TableSpec`` (how to compute it from the
``ReportInputs``, its columns and how to read it), ``compute_table`` and ``why_missing``.

report.md, the CSVs and ``tempora-sim show`` all read this registry, in its order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import polars as pl

from tempora_sim import analyses as an
from tempora_sim import protocols as P
from tempora_sim.reporting.inputs import ReportError, ReportInputs
from tempora_sim.reporting.markdown import (
    Column,
    offline_pivot,
    policies_pivot,
    spearman_pivot,
    sweep_pivot,
    winners_pivot,
)


@dataclass(frozen=True)
class TableSpec:
    """One report table: how to compute it and how to show it."""

    name: str
    title: str
    paper: str
    how_to_read: str
    compute: Callable[[ReportInputs], pl.DataFrame | None]
    columns: tuple[Column, ...] = ()
    #: custom Markdown renderer for wide (pivoted) layouts: (table of one group) -> (headers, rows)
    pivot: Callable[[pl.DataFrame], tuple[list[str], list[list[str]]]] | None = None
    needs_traces: bool = False


def _cached(name: str, fn: Callable[[ReportInputs], pl.DataFrame]) -> Callable[[ReportInputs], pl.DataFrame]:
    def run(inp: ReportInputs) -> pl.DataFrame:
        if name not in inp._cache:
            inp._cache[name] = fn(inp)
        return inp._cache[name]

    return run


#: column prefix -> header prefix: overall, then each temporal protocol ("disc. ")
_SHORT = {"": ""} | {f"{p}_": P.get(p).short for p in P.temporal()}


def _protocol_columns(stats: Sequence[tuple[str, str, str]]) -> tuple[Column, ...]:
    """The same statistics overall, then per temporal protocol (column prefix ``<protocol>_``)."""
    cols = []
    for prefix, short in _SHORT.items():
        cols += [Column(prefix + s, f"{short}{h}", f) for s, h, f in stats]
    return tuple(cols)


# ----------------------------------------------------------------------------- the tables
def _latency(inp: ReportInputs) -> pl.DataFrame | None:
    if inp.trace_rows is None:
        return None
    return an.latency_breakdown(inp.trace_rows, inp.lambdas())


def _pareto(inp: ReportInputs) -> pl.DataFrame:
    spent = an.budget_spent(inp.trace_rows, inp.utility) if inp.trace_rows is not None else None
    return an.pareto(inp.pooled, spent)


def _on_utility(fn: Callable[[pl.DataFrame], pl.DataFrame], episode: str | None = None) -> Callable[[ReportInputs], pl.DataFrame]:
    """Compute on the seed-pooled table; with ``episode``, join the utility's interval."""
    if episode is None:
        return lambda inp: fn(inp.pooled)
    return lambda inp: inp.with_bounds(an.attach_intervals(fn(inp.pooled), inp.intervals(), episode))


def _winners(inp: ReportInputs) -> pl.DataFrame:
    return an.winners(inp.pooled, intervals=inp.intervals())


def _offline(inp: ReportInputs) -> pl.DataFrame:
    t = an.offline_table(inp.pooled).with_columns(pl.lit(P.reference()).alias("protocol"), pl.lit(None, pl.Float64).alias("value"))
    return an.attach_intervals(t, inp.intervals()).drop("protocol", "value")


def _sweep(inp: ReportInputs) -> pl.DataFrame:
    t = inp.with_bounds(an.attach_intervals(an.sweep_table(inp.pooled), inp.intervals(), an.POOLED))
    pw = an.pooled_winners(inp.pooled, inp.intervals())
    g = an.group_columns(t)
    return t.join(pw.select(g + ["scenario", pl.col("certain").alias("best_certain")]), on=g + ["scenario"], how="left")


def _policies(inp: ReportInputs) -> pl.DataFrame:
    return an.policy_gains(inp.pooled, inp.intervals(), inp.trace_rows)


def _pareto_table(inp: ReportInputs) -> pl.DataFrame:
    t = _pareto(inp).with_columns(pl.lit(P.with_grids(("B_ms",))).alias("protocol"), pl.col("B_ms").alias("value"))
    return inp.with_bounds(an.attach_intervals(t, inp.intervals(), an.POOLED)).drop("protocol", "value")


TABLES: dict[str, TableSpec] = {}


def _register(spec: TableSpec) -> None:
    TABLES[spec.name] = spec


_register(
    TableSpec(
        "winners",
        "Winner of every (episode, scenario) cell",
        "Table 15, Figure 1",
        "Each row is an episode, each column a scenario from offline through the strictest to the most "
        "relaxed value of each protocol; the cell names the method with the highest utility. "
        "Methods within 1e-12 of each other share the cell (joined by ' = '). A name ending in '?' is an "
        "*uncertain* win: the paired bootstrap interval of its lead over the runner-up contains 0 "
        "(docs/design/statistics.md); the CSV has the lead's interval (lead_lo, lead_hi).",
        _cached("winners", _winners),
        (
            Column("episode", "episode"),
            Column("scenario", "scenario"),
            Column("winner", "winner"),
            Column("best_utility", "U (%)", "pct2"),
            Column("margin", "lead (pp)", "pp"),
            Column("runner_up", "runner-up"),
            Column("lead_lo", "lead CI", "ci"),
            Column("certain", "certain", "bool"),
        ),
        pivot=winners_pivot,
    )
)
_register(
    TableSpec(
        "win_counts",
        "Win counts",
        "Table 15 legend",
        "How many cells (episodes × scenarios, offline included) each method wins; a tied cell counts "
        "once for every tied method. 'certain' wins lead the runner-up with a paired bootstrap interval "
        "above 0, 'uncertain' ones do not (or tie). A method that wins offline but few temporal cells is "
        "the paper's rank instability.",
        _cached("win_counts", lambda i: an.win_counts(i.pooled, w=_cached("winners", _winners)(i))),
        (
            Column("method", "method"),
            Column("wins", "wins", "int"),
            Column("certain", "certain", "int"),
            Column("uncertain", "uncertain", "int"),
            Column("cells", "cells", "int"),
            Column("share", "share (%)", "pct"),
        )
        + tuple(Column(p, p, "int") for p in P.single()),
    )
)
_register(
    TableSpec(
        "offline",
        "Offline accuracy per episode",
        "Tables 1 and 10",
        "Offline utility (plain accuracy, no time pressure) per episode; bold is the episode's best, "
        "the number in brackets is the method's rank (1 = best); ± is half the width of the bootstrap "
        "interval over the episode's batches (pooled row: over episodes; bounds in the CSV).",
        _cached("offline", _offline),
        (
            Column("episode", "episode"),
            Column("method", "method"),
            Column("utility", "accuracy (%)", "pct2"),
            Column("rank", "rank", "int"),
        ),
        pivot=offline_pivot,
    )
)
_register(
    TableSpec(
        "sweep",
        "Pooled utility in every scenario",
        "Tables 11–13",
        "Utility pooled over all episodes (and seeds), per method and scenario; bold marks the best "
        "method of the scenario, with '?' when its lead over the runner-up is uncertain; ± is half the "
        "width of the bootstrap interval over episodes (and seeds). Read a row to see how a method "
        "fares as pressure relaxes (left to right).",
        _cached("sweep", _sweep),
        (
            Column("scenario", "scenario"),
            Column("method", "method"),
            Column("utility", "U (%)", "pct2"),
            Column("lo", "95% CI", "ci"),
            Column("best", "best", "bool"),
            Column("best_certain", "best certain", "bool"),
        ),
        pivot=sweep_pivot,
    )
)
_register(
    TableSpec(
        "rank_correlation",
        "Spearman correlation between offline and temporal rankings",
        "Table 25",
        "For each episode and temporal scenario, the methods are ranked by offline accuracy and by "
        "utility (ties get their average rank) and r_s is the correlation of the two rank vectors: 1 = "
        "the offline ranking holds, −1 = it is reversed, – = undefined (a ranking is constant). The "
        "last rows give the mean and sample standard deviation (ddof = 1) across episodes, and the "
        "bootstrap interval of the mean (episodes resampled).",
        _cached("rank_correlation_cells", lambda i: an.rank_correlation_cells(i.pooled)),
        (Column("episode", "episode"), Column("scenario", "scenario"), Column("spearman", "r_s", "r")),
        pivot=spearman_pivot,
    )
)
_register(
    TableSpec(
        "deficits",
        "Losses and mean deficit to the cell winner",
        "Table 23",
        "Over the temporal cells (offline excluded): how many cells the method does not win (a shared "
        "win is not a loss) and, over those lost cells, its mean utility deficit to the winner in "
        "percentage points. Lower is better for both.",
        _cached("deficits", lambda i: an.deficits(i.pooled)),
        (Column("method", "method"), Column("cells", "cells", "int"))
        + _protocol_columns((("losses", "losses", "int"), ("mean_deficit", "mean Δ (pp)", "pp"))),
    )
)
_register(
    TableSpec(
        "below_standard",
        "Evaluations below standard inference",
        "Table 24",
        "Temporal cells where the method's utility is strictly below standard inference's in the same "
        "cell (adapting did worse than not adapting), and the share of those misses in each protocol.",
        _on_utility(an.below_standard),
        (
            Column("method", "method"),
            Column("below", "below", "int"),
            Column("cells", "of cells", "int"),
        )
        + tuple(Column(f"{p}_share", f"{p} (%)", "pct") for p in P.temporal()),
    )
)
_register(
    TableSpec(
        "latency",
        "Per-batch latency breakdown",
        "Table 2",
        "Means over every adapt batch: δ̄ = ē + ℓ̄ is the total; ē − λ is the intrinsic overhead (the "
        "prediction itself is late), ℓ̄ the extrinsic overhead (the pipeline is busy after predicting); "
        "δ̄/λ is the slowdown over standard inference; update rate is the fraction of batches that "
        "changed state later predictions depend on; peak memory is the device's, where it could be measured.",
        _latency,
        (
            Column("method", "method"),
            Column("delta_mean", "δ̄ (ms)", "ms"),
            Column("e_mean", "ē (ms)", "ms"),
            Column("e_minus_lambda", "ē − λ (ms)", "ms"),
            Column("l_mean", "ℓ̄ (ms)", "ms"),
            Column("slowdown", "δ̄/λ", "x"),
            Column("update_rate", "updates (%)", "pct"),
            Column("peak_mem_mib", "peak mem (MiB)", "mib"),
            Column("batches", "batches", "int"),
        ),
        needs_traces=True,
    )
)


def _decomposition_of(grid: str):
    """The pooled decomposition at the strictest value of the protocol whose grid is ``grid``,
    its rows labelled with that protocol."""
    protocol = P.with_grids((grid,))
    return _on_utility(lambda u: an.decomposition(u, protocol).with_columns(pl.lit(protocol).alias("protocol")), an.POOLED)


_register(
    TableSpec(
        "discrete_decomposition",
        "Discrete decomposition at the strictest ρ",
        "Table 3",
        "U = α · ā_served: availability α (share of batches served in time) times the accuracy on the "
        "served batches. 'needed' is the served accuracy the method would need to match its best "
        "competitor (best other U / α); above 100 % it is insolvent: no accuracy gain can close the gap.",
        _decomposition_of("rho"),
        (
            Column("method", "method"),
            Column("alpha", "α (%)", "pct"),
            Column("alpha_lo", "α 95% CI", "ci"),
            Column("served", "|Q|", "int"),
            Column("served_acc", "ā_served (%)", "pct"),
            Column("utility", "U (%)", "pct2"),
            Column("lo", "U 95% CI", "ci"),
            Column("best_other_method", "best competitor"),
            Column("required_served_acc", "needed (%)", "pct"),
            Column("insolvent", "insolvent", "bool"),
        ),
    )
)
_register(
    TableSpec(
        "continuous_decomposition",
        "Continuous decomposition at the strictest T",
        "Table 4",
        "U = ā · κ̄ + Cov(a, κ): accuracy times responsiveness κ̄ (1 = on time, 0.5 = as late as T) plus "
        "their alignment. 'needed' is the accuracy required to match the best competitor at zero "
        "alignment (best other U / κ̄); above 100 % the method is insolvent.",
        _decomposition_of("T_ms"),
        (
            Column("method", "method"),
            Column("acc", "ā (%)", "pct2"),
            Column("kappa", "κ̄ (%)", "pct"),
            Column("kappa_lo", "κ̄ 95% CI", "ci"),
            Column("cov", "Cov(a, κ)", "cov"),
            Column("utility", "U (%)", "pct2"),
            Column("lo", "U 95% CI", "ci"),
            Column("best_other_method", "best competitor"),
            Column("required_acc", "needed (%)", "pct"),
            Column("insolvent", "insolvent", "bool"),
        ),
    )
)
_register(
    TableSpec(
        "amortised_decomposition",
        "Amortised decomposition at the strictest B",
        "Table 5",
        "U = β · ā_adapt + (1 − β) · ā_frozen: the model adapts on the first m = βN batches until the "
        "overhead budget is spent, then runs frozen. A frozen accuracy below standard inference's means "
        "the budget was spent on harmful adaptation. 'frozen gap' is m − m* when the trace had no frozen "
        "checkpoint at m and the nearest earlier one, m*, stood in (0 = exact).",
        _decomposition_of("B_ms"),
        (
            Column("method", "method"),
            Column("beta", "β (%)", "pct"),
            Column("beta_lo", "β 95% CI", "ci"),
            Column("m", "m", "num"),
            Column("acc_adapt", "ā_adapt (%)", "pct2"),
            Column("acc_frozen", "ā_frozen (%)", "pct2"),
            Column("frozen_gap", "frozen gap", "num"),
            Column("utility", "U (%)", "pct2"),
            Column("lo", "U 95% CI", "ci"),
            Column("below_standard", "below standard", "bool"),
        ),
    )
)
_register(
    TableSpec(
        "strict_terms",
        "Timing terms under the strictest pressure",
        "Table 14",
        "The timing-derived factors at the strictest value of each protocol: availability α, "
        "responsiveness κ̄, and the adaptation steps m the budget allows per episode (mean, range); "
        "'exhausted' says whether the budget ran out before the episode ended.",
        _on_utility(an.strict_terms),
        (
            Column("method", "method"),
            Column("alpha", "α (%)", "pct"),
            Column("kappa", "κ̄ (%)", "pct"),
            Column("m_mean", "m (mean)", "num"),
            Column("m_min", "m min", "int"),
            Column("m_max", "m max", "int"),
            Column("exhausted", "exhausted", "bool"),
        ),
    )
)
_register(
    TableSpec(
        "insolvency",
        "Insolvency across all discrete and continuous cells",
        "§4.3",
        "How many per-episode cells leave the method insolvent: it would need more than 100 % (served) "
        "accuracy to match the best competitor in the cell; 'max needed' is the worst case.",
        _on_utility(an.insolvency),
        (
            Column("method", "method"),
            Column("insolvent", "insolvent", "int"),
            Column("cells", "cells", "int"),
        )
        + tuple(Column(f"{p}_insolvent", p, "int") for p in P.temporal() if P.get(p).insolvency_factor)
        + (Column("max_required", "max needed (%)", "pct"),),
    )
)
_register(
    TableSpec(
        "pareto",
        "Amortised Pareto frontier over the budget",
        "§3.3",
        "Pooled amortised utility per method at each budget B, with the overhead actually spent per "
        "episode (from the traces; – when only results were given). 'efficient' points beat every "
        "cheaper point of the same method; 'gain' is the utility bought per extra second (pp/s); "
        "'best at B' marks the method to deploy at that budget.",
        _pareto_table,
        (
            Column("method", "method"),
            Column("B_ms", "B (ms)", "num"),
            Column("spent_ms", "spent (ms)", "num"),
            Column("utility", "U (%)", "pct2"),
            Column("lo", "U 95% CI", "ci"),
            Column("efficient", "efficient", "bool"),
            Column("gain_pp_per_s", "gain (pp/s)", "gain"),
            Column("best_at_B", "best at B", "bool"),
        ),
    )
)
_register(
    TableSpec(
        "policies",
        "Best sparse-adaptation policy of each method",
        "beyond the paper",
        "For every method traced under sparse-adaptation policies (`tempora-trace run --policy`, "
        "docs/design/design.md §11), the variant with the highest pooled utility in each scenario: a policy "
        "(`every:4` adapts on every 4th batch …) or `every batch` (the method as published), its U (%), "
        "and in brackets its gain over adapting on every batch in pp, with '?' when the paired bootstrap "
        "interval of that gain contains 0. The CSV adds the intervals, the adaptation rate of the best "
        "variant (share of batches it changed the model on) and the number of variants compared. The "
        "best (method, policy) overall is the winner in the tables above, where each policy trace "
        "competes as `method@policy`.",
        _cached("policies", _policies),
        (
            Column("method", "method"),
            Column("scenario", "scenario"),
            Column("best", "best"),
            Column("utility", "U (%)", "pct2"),
            Column("every_batch", "every batch (%)", "pct2"),
            Column("gain", "gain (pp)", "pp"),
            Column("certain", "certain", "bool"),
            Column("rate", "rate (%)", "pct"),
        ),
        pivot=policies_pivot,
    )
)


_register(
    TableSpec(
        "rank_correlation_summary",
        "Spearman r_s per scenario across episodes",
        "Table 25 (mean, std rows)",
        "Mean, its bootstrap interval (episodes resampled), sample standard deviation (ddof = 1), "
        "minimum and maximum of r_s over the episodes where it is defined; 'undefined' counts episodes "
        "where a ranking was constant.",
        _cached(
            "rank_correlation_summary",
            lambda i: an.summarise_rank_correlation(
                _cached("rank_correlation_cells", lambda j: an.rank_correlation_cells(j.pooled))(i), i.bootstrap
            ),
        ),
        (
            Column("scenario", "scenario"),
            Column("mean", "mean r_s", "r"),
            Column("ci_lo", "95% CI", "rci"),
            Column("std", "std", "r"),
            Column("min", "min", "r"),
            Column("max", "max", "r"),
            Column("episodes", "episodes", "int"),
            Column("undefined", "undefined", "int"),
        ),
    )
)

_register(
    TableSpec(
        "seed_stability",
        "Winner stability across seeds",
        "—",
        "With several seeds per group: the share of (episode, scenario) cells whose winner with k seeds "
        "pooled equals the winner with all seeds pooled (mean over seed subsets of size k, with the "
        "lowest and highest subset); 'single' rows are each seed alone. When the share is already 100 % "
        "with fewer seeds, the extra seeds did not change the grid.",
        _cached("seed_stability", lambda i: an.seed_stability(i.utility)),
        (
            Column("kind", "rows"),
            Column("seeds", "seeds"),
            Column("subsets", "subsets", "int"),
            Column("cells", "cells", "int"),
            Column("share", "same winner (%)", "pct"),
            Column("min", "min (%)", "pct"),
            Column("max", "max (%)", "pct"),
        ),
    )
)


def compute_table(name: str, inp: ReportInputs) -> pl.DataFrame | None:
    """The table, or None when these results cannot support it; ``why_missing`` says why."""
    if name not in TABLES:
        raise ReportError(f"unknown table '{name}'; tables: {', '.join(TABLES)}")
    try:
        return TABLES[name].compute(inp)
    except an.AnalysisError as exc:
        inp._cache.setdefault("why", {})[name] = str(exc)
        return None


def why_missing(name: str, inp: ReportInputs) -> str:
    if TABLES[name].needs_traces and inp.trace_rows is None:
        return "needs the traces (per-batch times): run the report on traces, or on a report directory made from them"
    return inp._cache.get("why", {}).get(name, "not available from these results")
