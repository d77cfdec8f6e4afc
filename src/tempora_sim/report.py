"""The report: every analysis as a table (Markdown + CSV), the figures, and a plain-language
summary generated from the numbers, in one directory.

``build_report(source, out)`` accepts either sweep results (a directory holding
``utility.parquet``, or that file) or traces (anything else: files or directories of trace
Parquet files), in which case it runs the sweep first. The latency table and the budget
actually spent need the traces' per-batch times; from results alone they are left out and the
report says so.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import polars as pl

from tempora_sim import analyses as an
from tempora_sim import stats as st
from tempora_sim.errors import SimError

RESULTS_FILE = "utility.parquet"


class ReportError(SimError, ValueError):
    """Bad report input (message is the whole story, shown as one line)."""


# ----------------------------------------------------------------------------- inputs
@dataclass
class ReportInputs:
    """What the analyses run on: the sweep's utility table and, when traces were given, their
    adapt rows (for the latency breakdown and the overhead actually spent)."""

    utility: pl.DataFrame
    trace_rows: pl.DataFrame | None = None
    source: str = ""
    from_traces: bool = False
    bootstrap: st.BootstrapOptions = field(default_factory=st.BootstrapOptions)
    #: rows of scenarios beyond the paper's (docs/design/design.md §9): their own report section
    scenarios: pl.DataFrame | None = None
    #: the sweep behind ``utility`` when it came from traces (timing replicates replay it again)
    sweep_result: object = field(default=None, repr=False)
    #: the loaded traces and the sweep options they were swept with (traces only): the
    #: interactive page (explore.html) replays them on its own dense grids
    traceset: object | None = None
    sweep_options: object | None = None
    _cache: dict = field(default_factory=dict, repr=False)

    def lambdas(self) -> pl.DataFrame:
        """λ per group and, with several seeds, per seed (each seed has its own standard trace)."""
        g = an.group_columns(self.utility) + ([an.SEED] if an.SEED in self.utility.columns else [])
        return (
            self.utility.select(g + ["lambda_ms"]).unique(subset=g, maintain_order=True) if g else self.utility.select("lambda_ms").head(1)
        )

    @property
    def pooled(self) -> pl.DataFrame:
        """The utility table pooled over seeds (what every comparison is made on)."""
        if "pooled" not in self._cache:
            self._cache["pooled"] = an.pool_seeds(self.utility)
        return self._cache["pooled"]

    def intervals(self) -> st.Intervals:
        """Bootstrap intervals of every utility (cells need the traces' rows; see analyses)."""
        if "intervals" not in self._cache:
            self._cache["intervals"] = an.utility_intervals(self.utility, self.trace_rows, self.bootstrap, timing=self.timing())
        return self._cache["intervals"]

    def timing(self):
        """Timing replicates of the sweep (:mod:`tempora_sim.timing_noise`), or None: results
        read without their traces, or ``--timing-replicates 0``."""
        if "timing" not in self._cache:
            from .replicates import replicates_of

            self._cache["timing"] = (
                replicates_of(self.sweep_result, self.bootstrap.timing_replicates, self.bootstrap.seed)
                if self.sweep_result is not None
                else None
            )
        return self._cache["timing"]

    def term_bounds(self) -> pl.DataFrame | None:
        """Bounds of U and every decomposition term of the pooled rows (tempora_sim.term_intervals)."""
        if "term_bounds" not in self._cache:
            from .term_intervals import pooled_bounds

            self._cache["term_bounds"] = pooled_bounds(self.utility, self.bootstrap, self.timing())
        return self._cache["term_bounds"]

    def with_bounds(self, t: pl.DataFrame) -> pl.DataFrame:
        """A pooled table with ``<term>_lo``/``<term>_hi`` columns joined (where it has the keys)."""
        if not {"method", "protocol", "value"} <= set(t.columns):
            return t
        from .term_intervals import attach_bounds

        return attach_bounds(t, self.term_bounds())

    def timing_line(self) -> str:
        """One sentence on what the intervals include about time (docs/design/statistics.md)."""
        from . import timing_noise

        return timing_noise.describe(self.timing(), self.bootstrap.timing_replicates)


def results_path(source: str | Path) -> Path | None:
    """``utility.parquet`` if ``source`` is sweep results, else None (then it is traces)."""
    p = Path(source)
    if p.is_dir() and (p / RESULTS_FILE).is_file():
        return p / RESULTS_FILE
    if p.is_file() and p.name == RESULTS_FILE:
        return p
    return None


def load_inputs(
    sources: str | Path | Sequence[str | Path],
    sweep_options=None,
    out: str | Path | None = None,
    bootstrap: st.BootstrapOptions | None = None,
    scenarios: bool = False,
) -> ReportInputs:
    """Read results, or load traces and sweep them with ``sweep_options`` (a
    :class:`~tempora_sim.options.SweepOptions` or a dict of its fields). ``out``, the report
    directory to be written, must not lie inside a trace directory. ``bootstrap`` sets the
    intervals' level, resamples and seed. ``scenarios`` also replays the traces under bursty
    arrivals and the combined protocols (docs/design/design.md §9) for their own section."""
    from . import report_scenarios as rs

    inp = _load_inputs(sources, sweep_options, out, scenarios)
    if bootstrap is not None:
        inp.bootstrap = bootstrap
    paper, scen = rs.split(inp.utility)
    if scen.height:
        inp.utility = paper
        inp.scenarios = scen if inp.scenarios is None else pl.concat([scen, inp.scenarios], how="diagonal_relaxed")
    return inp


def _load_inputs(sources, sweep_options, out, scenarios: bool = False) -> ReportInputs:
    from tempora_sim.options import SweepOptions

    if not isinstance(sweep_options, SweepOptions):
        sweep_options = SweepOptions.build(**(sweep_options or {}))
    sweep_options.resolve()  # every option checked before anything is read
    items = [sources] if isinstance(sources, (str, Path)) else list(sources)
    if not items:
        raise ReportError("no results or traces given")
    for item in items:
        if not Path(item).exists():
            raise ReportError(f"{item}: no such file or directory")
    results = [results_path(i) for i in items]
    if all(r is not None for r in results):
        if sweep_options.given():
            opts = ", ".join(sorted(sweep_options.given()))
            raise ReportError(f"sweep options ({opts}) apply to traces, but {items[0]} holds sweep results")
        try:
            utility = pl.concat([pl.read_parquet(r) for r in results], how="diagonal_relaxed")
        except Exception as exc:  # noqa: BLE001 - any unreadable file is a one-line user error
            raise ReportError(f"{results[0]}: not a readable utility table ({exc})") from None
        if scenarios:
            raise ReportError("--scenarios replays traces; these are sweep results (their scenario rows, if any, are reported anyway)")
        from . import report_scenarios as rs

        an.check_utility_table(rs.split(utility)[0])
        # a report directory keeps the traces' per-batch times beside its results
        times = [r.parent / TRACE_TIMES_FILE for r in results]
        rows = None
        if all(t.is_file() for t in times):
            rows = an.align_group_dtypes(pl.concat([pl.read_parquet(t) for t in times], how="diagonal_relaxed"), utility)
        return ReportInputs(utility=utility, trace_rows=rows, source=", ".join(map(str, items)))
    if any(r is not None for r in results):
        raise ReportError("give either sweep results or traces, not both")
    from tempora_sim.traces import load_traces

    try:
        from tempora_sim import run_sweep
    except ImportError:
        raise ReportError("this build of tempora_sim has no sweep; give sweep results (utility.parquet)") from None
    if out is not None:
        from tempora_sim.traces import check_out_outside

        check_out_outside(items, out)
    traces = load_traces(items if len(items) > 1 else items[0])
    result = run_sweep(traces, sweep_options)
    utility = result.frame
    rows = an.align_group_dtypes(an.trace_rows(traces.traces), utility)
    extra = None
    if scenarios:
        from . import report_scenarios as rs

        extra = rs.scenario_sweeps(traces, sweep_options)
    return ReportInputs(
        utility=utility,
        trace_rows=rows,
        source=", ".join(map(str, items)),
        from_traces=True,
        scenarios=extra,
        traceset=traces,
        sweep_options=sweep_options,
        sweep_result=result,
    )


# ----------------------------------------------------------------------------- formatting
def _pct(x, digits=1):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return f"{x * 100:.{digits}f}"


FORMATS: dict[str, Callable[[object], str]] = {
    "pct": lambda x: _pct(x, 1),
    "pct2": lambda x: _pct(x, 2),
    "pp": lambda x: _pct(x, 2),
    "ms": lambda x: "–" if x is None else f"{x:.1f}",
    "x": lambda x: "–" if x is None else f"{x:.2f}×",
    "r": lambda x: "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}",
    "num": lambda x: "–" if x is None else f"{x:.1f}",
    "int": lambda x: "–" if x is None else f"{int(x):,}",
    "str": lambda x: "–" if x is None else str(x),
    "bool": lambda x: "–" if x is None else ("yes" if x else "no"),
    "mib": lambda x: "–" if x is None else f"{x:,.0f}",
    "gain": lambda x: "–" if x is None else f"{x:.2f}",
    "cov": lambda x: "–" if x is None else f"{x:.4f}",
}


@dataclass(frozen=True)
class Column:
    name: str
    header: str
    fmt: str = "str"


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


_SHORT = {"": "", "discrete_": "disc. ", "continuous_": "cont. ", "amortised_": "amort. "}


def _protocol_columns(stats: Sequence[tuple[str, str, str]]) -> tuple[Column, ...]:
    """The same statistics overall, then per temporal protocol (column prefix ``<protocol>_``)."""
    cols = []
    for prefix, short in _SHORT.items():
        cols += [Column(prefix + s, f"{short}{h}", f) for s, h, f in stats]
    return tuple(cols)


# ----------------------------------------------------------------------------- pivots
def _scenarios(t: pl.DataFrame) -> list[str]:
    return t.select("scenario", "scenario_order").unique().sort("scenario_order").get_column("scenario").to_list()


def _winners_pivot(t: pl.DataFrame):
    scen = _scenarios(t)
    look = {
        (r["episode"], r["scenario"]): r["winner"] + ("?" if r.get("certain") is False and r["n_winners"] == 1 else "")
        for r in t.iter_rows(named=True)
    }
    rows = [[ep] + [look.get((ep, s), "–") for s in scen] for ep in an.episode_order(t.get_column("episode").unique().to_list())]
    return ["episode"] + scen, rows


def _spearman_pivot(t: pl.DataFrame):
    scen = _scenarios(t)
    look = {(r["episode"], r["scenario"]): r["spearman"] for r in t.iter_rows(named=True)}
    rows = [[ep] + [FORMATS["r"](look.get((ep, s))) for s in scen] for ep in an.episode_order(t.get_column("episode").unique().to_list())]
    summary = an.summarise_rank_correlation(t)
    by = {r["scenario"]: (r["mean"], r["std"]) for r in summary.iter_rows(named=True)}
    ci = {r["scenario"]: (r["ci_lo"], r["ci_hi"]) for r in summary.iter_rows(named=True)}
    rows.append(["**mean**"] + [FORMATS["r"](by[s][0]) for s in scen])
    rows.append(["**95% CI of the mean**"] + [_cell(Column("ci_lo", "", "rci"), {"ci_lo": ci[s][0], "ci_hi": ci[s][1]}) for s in scen])
    rows.append(["**std**"] + [FORMATS["r"](by[s][1]) for s in scen])
    return ["episode"] + scen, rows


def _sweep_pivot(t: pl.DataFrame):
    scen = _scenarios(t)
    methods = list(dict.fromkeys(t.get_column("method").to_list()))
    look = {(r["method"], r["scenario"]): r for r in t.iter_rows(named=True)}
    rows = []
    for m in methods:
        row = [m]
        for s in scen:
            r = look.get((m, s))
            if r is None:
                row.append("–")
            else:
                cell = FORMATS["pct2"](r["utility"])
                if r["best"]:
                    cell = f"**{cell}**" + ("?" if r.get("best_certain") is False else "")
                row.append(cell + _pm(r))
        rows.append(row)
    return ["method"] + scen, rows


def _policies_pivot(t: pl.DataFrame):
    """Rows: methods; columns: scenarios; cell: the best policy and its gain over adapting on
    every batch (pp), '?' when the gain is uncertain."""
    scen = _scenarios(t)
    methods = list(dict.fromkeys(t.get_column("method").to_list()))
    look = {(r["method"], r["scenario"]): r for r in t.iter_rows(named=True)}
    rows = []
    for m in methods:
        row = [m]
        for s in scen:
            r = look.get((m, s))
            if r is None:
                row.append("–")
            elif r["best"] == an.EVERY_BATCH:
                row.append(f"every batch {_pct(r['utility'], 1)}")
            else:
                gain = "" if r["gain"] is None else f" ({r['gain'] * 100:+.1f} pp{'?' if r['certain'] is False else ''})"
                row.append(f"{r['best']} {_pct(r['utility'], 1)}{gain}")
        rows.append(row)
    return ["method"] + scen, rows


def _offline_pivot(t: pl.DataFrame):
    methods = list(dict.fromkeys(t.get_column("method").to_list()))
    look = {(r["episode"], r["method"]): r for r in t.iter_rows(named=True)}
    eps = an.episode_order(t.get_column("episode").unique().to_list())
    if an.POOLED in set(t.get_column("episode").to_list()):
        eps.append(an.POOLED)
    rows = []
    for ep in eps:
        row = ["**pooled**" if ep == an.POOLED else ep]
        for m in methods:
            r = look.get((ep, m))
            row.append(
                "–"
                if r is None
                else (f"**{_pct(r['utility'], 2)}**" if r["rank"] == 1 else f"{_pct(r['utility'], 2)} ({r['rank']})") + _pm(r)
            )
        rows.append(row)
    return ["episode"] + methods, rows


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
    t = an.offline_table(inp.pooled).with_columns(pl.lit("offline").alias("protocol"), pl.lit(None, pl.Float64).alias("value"))
    return an.attach_intervals(t, inp.intervals()).drop("protocol", "value")


def _sweep(inp: ReportInputs) -> pl.DataFrame:
    t = inp.with_bounds(an.attach_intervals(an.sweep_table(inp.pooled), inp.intervals(), an.POOLED))
    pw = an.pooled_winners(inp.pooled, inp.intervals())
    g = an.group_columns(t)
    return t.join(pw.select(g + ["scenario", pl.col("certain").alias("best_certain")]), on=g + ["scenario"], how="left")


def _policies(inp: ReportInputs) -> pl.DataFrame:
    return an.policy_gains(inp.pooled, inp.intervals(), inp.trace_rows)


def _pareto_table(inp: ReportInputs) -> pl.DataFrame:
    t = _pareto(inp).with_columns(pl.lit("amortised").alias("protocol"), pl.col("B_ms").alias("value"))
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
        pivot=_winners_pivot,
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
            Column("offline", "offline", "int"),
            Column("discrete", "discrete", "int"),
            Column("continuous", "continuous", "int"),
            Column("amortised", "amortised", "int"),
        ),
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
        pivot=_offline_pivot,
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
        pivot=_sweep_pivot,
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
        pivot=_spearman_pivot,
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
            Column("discrete_share", "discrete (%)", "pct"),
            Column("continuous_share", "continuous (%)", "pct"),
            Column("amortised_share", "amortised (%)", "pct"),
        ),
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
        "changed parameters; peak memory is the device's, where it could be measured.",
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
_register(
    TableSpec(
        "discrete_decomposition",
        "Discrete decomposition at the strictest ρ",
        "Table 3",
        "U = α · ā_served: availability α (share of batches served in time) times the accuracy on the "
        "served batches. 'needed' is the served accuracy the method would need to match its best "
        "competitor (best other U / α); above 100 % it is insolvent: no accuracy gain can close the gap.",
        _on_utility(lambda u: an.discrete_decomposition(u).with_columns(pl.lit("discrete").alias("protocol")), an.POOLED),
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
        _on_utility(lambda u: an.continuous_decomposition(u).with_columns(pl.lit("continuous").alias("protocol")), an.POOLED),
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
        _on_utility(lambda u: an.amortised_decomposition(u).with_columns(pl.lit("amortised").alias("protocol")), an.POOLED),
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
            Column("discrete_insolvent", "discrete", "int"),
            Column("continuous_insolvent", "continuous", "int"),
            Column("max_required", "max needed (%)", "pct"),
        ),
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
        pivot=_policies_pivot,
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


# ----------------------------------------------------------------------------- rendering
def groups_of(df: pl.DataFrame) -> list[dict]:
    g = an.group_columns(df)
    if not g:
        return [{}]
    return [dict(zip(g, r)) for r in df.select(g).unique(maintain_order=True).sort(g).iter_rows()]


def filter_group(t: pl.DataFrame, group: dict) -> pl.DataFrame:
    for k, v in group.items():
        if k in t.columns:
            t = t.filter(pl.col(k) == v)
    return t


def _seeds_of(pooled: pl.DataFrame, group: dict) -> str:
    """' · seeds 2025, 2026 (pooled)' or ' · seed 2025' for a group of the seed-pooled table."""
    if an.SEEDS not in pooled.columns:
        return ""
    seeds = sorted(set(", ".join(filter_group(pooled, group).get_column(an.SEEDS).unique().to_list()).split(", ")))
    return f" · seed {seeds[0]}" if len(seeds) == 1 else f" · seeds {', '.join(seeds)} (pooled)"


def group_label(group: dict) -> str:
    """The group's own label when the table carries one (it names every identity field)."""
    if group.get("group"):
        return str(group["group"])
    return " · ".join(f"{k}={v}" for k, v in group.items()) or "all traces"


def formatted_rows(spec: TableSpec, t: pl.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Headers and formatted cells of one group's table (pivoted where the spec says so)."""
    if spec.pivot is not None:
        return spec.pivot(t)
    cols = [c for c in spec.columns if c.name in t.columns]
    rows = [[_cell(c, r) for c in cols] for r in t.iter_rows(named=True)]
    return [c.header for c in cols], rows


_INTERVAL_PAIRS = {"lo": "hi", "lead_lo": "lead_hi", "ci_lo": "ci_hi"} | {
    f"{t}_lo": f"{t}_hi" for t in ("utility", "alpha", "served_acc", "acc", "kappa", "cov", "m", "beta", "acc_adapt", "acc_frozen")
}


def _cell(c: Column, r: dict) -> str:
    """One formatted cell; ``ci`` / ``rci`` columns name the interval's lower bound and show
    ``[lo, hi]`` (in % or as r)."""
    if c.fmt in ("ci", "rci"):
        lo, hi = r.get(c.name), r.get(_INTERVAL_PAIRS[c.name])
        if lo is None or hi is None:
            return "–"
        f = FORMATS["r"] if c.fmt == "rci" else FORMATS["pct2"]
        return f"[{f(lo)}, {f(hi)}]"
    return FORMATS[c.fmt](r[c.name])


def _pm(r: dict | None) -> str:
    """' ±h' with h half the interval's width in pp, or '' without an interval."""
    if r is None or r.get("lo") is None or r.get("hi") is None:
        return ""
    return f" ±{(r['hi'] - r['lo']) * 50:.1f}"


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    def esc(s: str) -> str:
        return s.replace("|", "\\|")

    lines = ["| " + " | ".join(map(esc, headers)) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def csv_frame(t: pl.DataFrame) -> pl.DataFrame:
    """CSV cannot hold list columns; join them with ' = ' like the tie labels."""
    lists = [c for c, d in t.schema.items() if isinstance(d, pl.List)]
    return t.with_columns([pl.col(c).list.join(" = ") for c in lists]) if lists else t


def slug(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-").lower()


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

#: Sections of report.md, in reading order (each lists table names).
SECTIONS = (
    ("Who wins where", ("win_counts", "winners", "offline", "sweep", "seed_stability")),
    ("Do offline rankings predict temporal ones?", ("rank_correlation", "rank_correlation_summary")),
    ("What losing costs", ("deficits", "below_standard")),
    (
        "Why: latency and decompositions under the strictest pressure",
        ("latency", "strict_terms", "discrete_decomposition", "continuous_decomposition", "amortised_decomposition", "insolvency"),
    ),
    ("What a larger budget buys", ("pareto",)),
    ("Adapt less, serve more: sparse-adaptation policies", ("policies",)),
)
TRACE_TIMES_FILE = "trace_times.parquet"
#: Rows of the scenarios beyond the paper's (bursty arrivals, combined protocols), when present.
SCENARIOS_FILE = "scenarios.parquet"
#: What a report writes into its folder (checked for clashes before any work).
REPORT_FOLDERS = ("tables", "figures")
#: the interactive page (tempora-sim explore), written beside report.md when traces were given
EXPLORE_FILE = "explore.html"
REPORT_FILES = ("report.md", RESULTS_FILE, TRACE_TIMES_FILE, SCENARIOS_FILE, EXPLORE_FILE)


# ----------------------------------------------------------------------------- summary
def _row(t: pl.DataFrame | None, **eq) -> dict | None:
    if t is None:
        return None
    for k, v in eq.items():
        t = t.filter(pl.col(k) == v)
    return t.row(0, named=True) if t.height else None


def _pc(x: float | None, d: int = 1) -> str:
    return _pct(x, d) + "%" if x is not None else "–"


def _count_phrase(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def summary_lines(inp: ReportInputs, group: dict) -> list[str]:
    """Plain-language findings for one group, each sentence generated from the tables."""
    g = lambda name: (lambda t: None if t is None else filter_group(t, group))(compute_table(name, inp))  # noqa: E731
    u = filter_group(inp.pooled, group)
    w = g("winners")
    lines: list[str] = []
    episodes = an.episode_order(w.get_column("episode").unique().to_list())
    n_ep = len(episodes)
    methods = an.method_order(u)
    temporal = w.filter(pl.col("protocol") != "offline")
    scope = (
        f" and {temporal.select('scenario').n_unique()} temporal scenarios ({temporal.height} temporal cells)"
        if temporal.height
        else " (offline only: no temporal scenarios in these results)"
    )
    per_seed = _seed_lambdas(inp.utility, group)
    lam_text = (
        f"λ = {u.get_column('lambda_ms').first():.2f} ms"
        if len(per_seed) <= 1
        else "λ per seed " + ", ".join(f"{s}: {x:.2f} ms" for s, x in per_seed)
    )
    lines.append(f"{len(methods)} methods over {n_ep} episode{'s' if n_ep != 1 else ''}{scope}, {lam_text}.")
    timing = inp.timing_line()
    lines.append(timing[:1].upper() + timing[1:] + ".")
    if len(per_seed) > 1:
        lo, hi = min(x for _, x in per_seed), max(x for _, x in per_seed)
        if hi > SEED_LAMBDA_SPREAD * lo:
            lines.append(
                f"**The seeds were not timed under the same conditions**: their λ differ by {hi / lo - 1:.0%} "
                f"({lo:.1f} to {hi:.1f} ms), so pooling them mixes machine states; the pooled winners and "
                "intervals include that spread (re-trace on a quiet machine to measure the seeds alone)."
            )
    # offline favourite vs temporal winners
    off = w.filter(pl.col("protocol") == "offline").explode("winners")
    fav = None
    if off.height:
        oc = off.group_by("winners").len().sort(["len", "winners"], descending=[True, False])
        fav, fav_n = oc.row(0)
        lines.append(f"**Offline**, {fav} is best in {fav_n}/{n_ep} episodes.")
    if temporal.height:
        lines.append(_pressure_sentence(w, temporal, fav))
    lines += _strict_sentences(inp, group, w, n_ep, fav)
    rs = g("rank_correlation_summary")
    if rs is not None and rs.height:
        parts = []
        for proto in an.TEMPORAL_PROTOCOLS:
            sub = rs.filter(pl.col("protocol") == proto).sort("scenario_order")
            if sub.height >= 1 and sub.get_column("mean").drop_nulls().len():
                a, b = sub.row(0, named=True), sub.row(-1, named=True)
                txt = f"{FORMATS['r'](a['mean'])} at {a['scenario']}"
                if sub.height > 1:
                    txt += f" → {FORMATS['r'](b['mean'])} at {b['scenario']}"
                parts.append(txt)
        if parts:
            lines.append(
                "**Offline rankings as a predictor**: mean Spearman r_s from the strictest to the most relaxed "
                "value of each protocol: " + "; ".join(parts) + " (1 = offline order holds, −1 = reversed)."
            )
    bs = g("below_standard")
    if bs is not None and bs.height:
        worst = bs.sort(["below", "method"], descending=[True, False]).row(0, named=True)
        never = bs.filter(pl.col("below") == 0).get_column("method").to_list()
        if worst["below"] > 0:
            shares = {p: worst.get(f"{p}_share") or 0 for p in an.TEMPORAL_PROTOCOLS}
            where = max(shares, key=shares.get)
            sent = (
                f"**Worse than not adapting**: {worst['method']} falls below standard inference in "
                f"{worst['below']}/{worst['cells']} temporal cells ({_pc(shares[where], 0)} of them {where})."
            )
            sent += (
                f" Never below standard: {_count_phrase(never)}." if never else " Every method falls below standard inference somewhere."
            )
            lines.append(sent)
        else:
            lines.append("No method ever falls below standard inference.")
    par = g("pareto")
    if par is not None and par.height:
        lines.append(_budget_sentence(par))
    lat = g("latency")
    if lat is not None and lat.height:
        lines.append(_root_cause_sentence(lat))
    elif inp.trace_rows is None:
        lines.append("The latency breakdown needs the traces: run `tempora-sim report TRACES` to include it.")
    return lines


#: Seeds whose λ differ by more than this factor were timed under different machine conditions.
SEED_LAMBDA_SPREAD = 1.10


def _seed_lambdas(utility: pl.DataFrame, group: dict) -> list[tuple[int, float]]:
    """(seed, λ) of the seeds pooled in one comparison group (empty without a seed column)."""
    if an.SEED not in utility.columns:
        return []
    t = filter_group(utility, group).group_by(an.SEED).agg(pl.col("lambda_ms").first()).sort(an.SEED)
    return [(int(s), float(x)) for s, x in t.iter_rows() if x is not None]


def _changed_cells(w: pl.DataFrame) -> pl.DataFrame:
    """Temporal cells whose winner(s) differ from the same episode's offline winner(s)."""
    g = an.group_columns(w)
    off = w.filter(pl.col("protocol") == "offline").select(g + ["episode", pl.col("winner").alias("_off")])
    t = w.filter(pl.col("protocol") != "offline").join(off, on=g + ["episode"], how="left")
    return t.filter(pl.col("_off").is_not_null() & (pl.col("winner") != pl.col("_off")))


def _pressure_sentence(w: pl.DataFrame, temporal: pl.DataFrame, fav: str | None) -> str:
    """Whether time pressure changes the winners, said only as far as the cells show it.

    A change is a temporal cell whose winner differs from its episode's offline winner; a
    change is *certain* when the temporal winner's lead is certain (docs/design/statistics.md)."""
    changed = _changed_cells(w)
    n_t = temporal.height
    tc = temporal.explode("winners").group_by("winners").len().sort(["len", "winners"], descending=[True, False])
    top = [f"{m} {n}" for m, n in tc.head(3).iter_rows()]
    if not changed.height:
        return (
            f"**Under time pressure the winners do not change**: every one of the {n_t} temporal cells is won "
            f"by its episode's offline winner ({_count_phrase(top)} wins)."
        )
    assessed = "certain" in changed.columns and changed.get_column("certain").is_not_null().any()
    n_c = int(changed.get_column("certain").fill_null(False).sum()) if assessed else None
    sent = f"**Under time pressure** the winner differs from the episode's offline winner in {changed.height} of {n_t} temporal cells"
    if n_c is not None:
        sent += f" ({n_c} of them with a certain lead)" if n_c else " (none of them with a certain lead: each could be a coin toss)"
    sent += f"; wins: {_count_phrase(top)}."
    if fav is not None:
        fav_t = dict(tc.iter_rows()).get(fav, 0)
        sent += f" The offline favourite {fav} wins {fav_t or 'none'} of the {n_t} temporal cells."
    return sent


def _root_cause_sentence(lat: pl.DataFrame) -> str:
    """The slowest method's latency split; an overhead is only stated where it is positive
    (ē − λ < 0 means λ's provision covers the prediction: no intrinsic overhead)."""
    slow = lat.sort("slowdown", descending=True).row(0, named=True)
    if slow["slowdown"] is None or slow["slowdown"] <= 1.0:
        return (
            f"**Root cause**: no method takes longer than λ per batch on average (the slowest, "
            f"{slow['method']}, takes δ̄/λ = {slow['slowdown']:.2f}×), so time pressure costs little here."
        )
    parts = []
    if slow["l_mean"] is not None and slow["l_mean"] > 0.05:
        parts.append(f"{slow['l_mean']:.1f} ms of its {slow['delta_mean']:.1f} ms comes after the prediction (extrinsic ℓ̄)")
    if slow["e_minus_lambda"] is not None and slow["e_minus_lambda"] > 0.05:
        parts.append(f"{slow['e_minus_lambda']:.1f} ms before it (intrinsic ē − λ)")
    else:
        parts.append("its prediction itself arrives within λ (no intrinsic overhead)")
    return (
        f"**Root cause**: the slowest method, {slow['method']}, takes δ̄/λ = {slow['slowdown']:.2f}× standard "
        f"inference per batch; " + " and ".join(parts) + "."
    )


def _budget_sentence(par: pl.DataFrame) -> str:
    """Who is best at each budget, consecutive budgets with the same best merged into ranges."""
    best = par.filter(pl.col("best_at_B")).group_by("B_ms").agg(pl.col("method").sort().str.join(" = ")).sort("B_ms").rows()
    runs: list[list] = []
    for b, m in best:
        if runs and runs[-1][0] == m:
            runs[-1][2] = b
        else:
            runs.append([m, b, b])
    fmt = lambda b: an.format_value("amortised", b).removeprefix("B=")  # noqa: E731
    parts = [f"{m} at B = {fmt(lo)}" if lo == hi else f"{m} for B = {fmt(lo)}–{fmt(hi)}" for m, lo, hi in runs]
    return "**What a budget buys** (pooled amortised utility): best is " + "; ".join(parts) + "."


def _cell_wins(w: pl.DataFrame, protocol: str) -> tuple[str, str, list[tuple[str, int]]] | None:
    part = w.filter(pl.col("protocol") == protocol)
    if not part.height:
        return None
    first = part.sort("scenario_order").row(0, named=True)
    cell = part.filter(pl.col("scenario") == first["scenario"]).explode("winners")
    counts = cell.group_by("winners").len().sort(["len", "winners"], descending=[True, False]).rows()
    return first["scenario"], protocol, counts


def _strict_sentences(inp: ReportInputs, group: dict, w: pl.DataFrame, n_ep: int, fav: str | None) -> list[str]:
    out = []
    tables = {p: compute_table(f"{p}_decomposition", inp) for p in an.TEMPORAL_PROTOCOLS}
    for proto in an.TEMPORAL_PROTOCOLS:
        cw, t = _cell_wins(w, proto), tables[proto]
        if cw is None or t is None:
            continue
        t = filter_group(t, group)
        scen, _, counts = cw
        lead, k = counts[0]
        r = _row(t, method=lead)
        if r is None:
            continue
        head = f"**Strictest {proto} pressure ({scen})**: {lead} wins {k}/{n_ep} episodes"
        cell = w.filter((pl.col("scenario") == scen) & pl.col("winners").list.contains(lead))
        if cell.get_column("certain").is_not_null().any():
            head += f" ({int(cell.get_column('certain').fill_null(False).sum())} of them certain)"
        other = fav if fav and fav != lead else None
        o = _row(t, method=other) if other else None
        if proto == "discrete":
            s = f"{head}: it serves α = {_pc(r['alpha'])} of batches at {_pc(r['served_acc'])} served accuracy, U = {_pc(r['utility'])}."
            if o:
                s += (
                    f" {other} serves only α = {_pc(o['alpha'])}; to match the best competitor it would need "
                    f"{_pc(o['required_served_acc'])} served accuracy (it reaches {_pc(o['served_acc'])})"
                    + (" — insolvent: no accuracy gain can close the gap." if o["insolvent"] else ".")
                )
        elif proto == "continuous":
            s = f"{head}: its {_pc(r['acc'])} accuracy, discounted by responsiveness κ̄ = {_pc(r['kappa'])}, gives U = {_pc(r['utility'])}."
            if o:
                s += (
                    f" {other}'s {_pc(o['acc'])} accuracy is discounted to U = {_pc(o['utility'])} (κ̄ = "
                    f"{_pc(o['kappa'])}); it would need {_pc(o['required_acc'])} accuracy to match"
                    + (" — insolvent." if o["insolvent"] else ".")
                )
        else:
            frozen = "" if r["acc_frozen"] is None else f", then ā_frozen = {_pc(r['acc_frozen'])} frozen"
            s = f"{head}: it adapts on β = {_pc(r['beta'])} of the stream{frozen}, U = {_pc(r['utility'])}."
            below = t.filter(pl.col("below_standard").fill_null(False)) if "below_standard" in t.columns else t.clear()
            base = _row(t, method=an.BASELINE)
            frozen_worse = below.filter((pl.col("beta") < 1) & (pl.col("acc_frozen") < base["utility"])) if base else below.clear()
            if frozen_worse.height:
                names = frozen_worse.get_column("method").to_list()
                s += (
                    f" {_count_phrase(names)} end{'s' if len(names) == 1 else ''} below standard inference: the budget "
                    f"runs out after {_pc(frozen_worse.get_column('beta').max())} of the stream or less and the frozen "
                    "model is worse than the source model (harmful adaptation)."
                )
            rest = below.filter(~pl.col("method").is_in(frozen_worse.get_column("method").to_list()))
            if rest.height:
                names = rest.get_column("method").to_list()
                too = " too" if frozen_worse.height else ""
                s += f" {_count_phrase(names)} {'is' if len(names) == 1 else 'are'} below standard inference{too}."
        out.append(s)
    return out


# ----------------------------------------------------------------------------- build
@dataclass
class ReportResult:
    report: Path
    tables: list[Path]
    figures: list[Path]
    seconds: dict[str, float]


def build_report(
    inp: ReportInputs,
    out: str | Path,
    all_episodes: bool = False,
    episodes: Sequence[str] | None = None,
    figures: bool = True,
    explore: bool = True,
) -> ReportResult:
    """Write ``out/report.md``, ``out/tables/*.csv`` and ``out/figures/*.{png,pdf}``, and with
    traces (and ``explore``) the interactive page ``out/explore.html``, linked from report.md.

    The utility curves show one episode per corruption category (four by default),
    ``episodes`` to choose, ``all_episodes`` for every episode."""
    from tempora_schema.outputs import check_output_dir, staged_dir

    final = check_output_dir(out, folders=REPORT_FOLDERS, files=REPORT_FILES)
    if episodes:  # refused before anything is drawn
        known = an.episode_order([e for e in inp.utility.get_column("episode").unique().to_list() if e != an.POOLED])
        missing = [e for e in episodes if e not in known]
        if missing:
            raise ReportError(f"episode(s) {', '.join(missing)} not in the results; episodes: {', '.join(known)}")
    # Built in a staging folder and published whole (report.md last): a failure anywhere leaves
    # the previous report, if any, exactly as it was.
    with staged_dir(final, what="report", last=("report.md",), folders=REPORT_FOLDERS, files=REPORT_FILES) as stage:
        result = _build_report(inp, stage, all_episodes, episodes, figures, explore)
    moved = lambda p: final / p.relative_to(stage)  # noqa: E731
    return ReportResult(moved(result.report), [moved(p) for p in result.tables], [moved(p) for p in result.figures], result.seconds)


def _build_report(
    inp: ReportInputs, out: Path, all_episodes: bool, episodes: Sequence[str] | None, figures: bool, explore: bool = True
) -> ReportResult:
    import time

    from tempora_schema.outputs import to_bytes, write_file

    t0 = time.perf_counter()
    (out / "tables").mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    if inp.from_traces:
        write_file(out / RESULTS_FILE, to_bytes(inp.utility.write_parquet))
        write_file(out / TRACE_TIMES_FILE, to_bytes(inp.trace_rows.write_parquet))
    if inp.scenarios is not None and inp.scenarios.height:
        write_file(out / SCENARIOS_FILE, to_bytes(inp.scenarios.write_parquet))
    computed: dict[str, pl.DataFrame | None] = {name: compute_table(name, inp) for name in TABLES}
    table_paths = []
    for name, t in computed.items():
        if t is not None:
            p = out / "tables" / f"{name}.csv"
            write_file(p, csv_frame(t).write_csv().encode("utf-8"))
            table_paths.append(p)
    seconds["tables"] = time.perf_counter() - t0
    groups = groups_of(inp.utility)
    multi = len(groups) > 1
    # ("group" is the full label: named in headings, too long for file names)
    varying = [k for k in (groups[0] if groups else {}) if k != "group" and len({str(g[k]) for g in groups}) > 1]
    fig_paths: list[Path] = []
    md = [
        "# Tempora report",
        "",
        f"Source: `{inp.source}` ({'traces, swept for this report' if inp.from_traces else 'sweep results'}). "
        "Utilities and accuracies are in %, times in ms. Every table is also in `tables/<name>.csv` "
        "(all groups, fractions rather than %).",
        "",
    ]
    if explore and inp.traceset is not None and _temporal(inp.sweep_options):
        from .cli_explore import DEFAULT_PROTOCOLS, render_page
        from .explore import build_data
        from .options import SweepOptions

        t_explore = time.perf_counter()
        opts = inp.sweep_options if isinstance(inp.sweep_options, SweepOptions) else SweepOptions.build(**(inp.sweep_options or {}))
        if "protocols" not in opts.given():
            opts = SweepOptions.build(opts, protocols=DEFAULT_PROTOCOLS)  # the page moves both pressures at once too
        data = build_data(inp.traceset, opts, (opts.arrivals,), inp.bootstrap, source=inp.source)
        write_file(out / EXPLORE_FILE, render_page(data))
        seconds["explore"] = time.perf_counter() - t_explore
        md += [
            f"**Interactive:** [{EXPLORE_FILE}]({EXPLORE_FILE}) moves ρ, T and B (and both pressures at once) over dense "
            "grids and shows the winners, intervals and recommendation at every value; it opens offline in any browser.",
            "",
        ]
    t1 = time.perf_counter()
    for gi, group in enumerate(groups):
        # figure names: the group values that tell the groups apart, e.g. "cpu-other-winners.png"
        prefix = (f"{gi + 1}-" + (f"{slug('-'.join(str(group[k]) for k in varying))}-" if varying else "")) if multi else ""
        hx = "##" if not multi else "###"
        seeds = _seeds_of(inp.pooled, group)
        if multi:
            md += [f"## Group {gi + 1}: {group_label(group)}{seeds}", ""]
        else:
            md += [f"Group: {group_label(group)}{seeds}.", ""]
        md += [f"{hx} Summary", ""] + [f"- {s}" for s in summary_lines(inp, group)] + [""]
        figs = _group_figures(inp, group, computed, out / "figures", prefix, all_episodes, episodes) if figures else {}
        fig_paths += [p for ps in figs.values() for p in ps]
        for title, names in SECTIONS:
            md += [f"{hx} {title}", ""]
            for fig_name, caption in FIGURE_CAPTIONS.get(title, ()):
                if fig_name in figs:
                    png, pdf = figs[fig_name]
                    md += [
                        f"![{caption}]({png.relative_to(out).as_posix()})",
                        "",
                        f"*{caption}* ([PDF]({pdf.relative_to(out).as_posix()}))",
                        "",
                    ]
            for name in names:
                md += _table_markdown(name, computed[name], group, hx, why_missing(name, inp))
        if inp.scenarios is not None and inp.scenarios.height:
            from . import report_scenarios as rs

            md += rs.markdown(filter_group(inp.utility, group), filter_group(inp.scenarios, group), hx)
    from . import report_devices

    md += report_devices.markdown(inp.utility)
    seconds["figures+markdown"] = time.perf_counter() - t1
    report = out / "report.md"
    write_file(report, ("\n".join(md).rstrip() + "\n").encode("utf-8"))
    seconds["total"] = time.perf_counter() - t0
    return ReportResult(report, table_paths, fig_paths, seconds)


def _temporal(options) -> bool:
    """Do the report's sweep options ask for a temporal protocol (what the page moves)?"""
    from .options import SweepOptions

    opts = options if isinstance(options, SweepOptions) else SweepOptions.build(**(options or {}))
    return "protocols" not in opts.given() or any(p != "offline" for p in opts.resolve().protocols)


FIGURE_CAPTIONS = {
    "Who wins where": (
        ("winners", "Winner of every episode × scenario cell (paper Figure 1); legend: wins"),
        (
            "curves",
            "Utility against ρ, T and B per episode (paper Figure 3): green = lead of the best "
            "method over standard inference, grey = worse than standard (methods drawn grey)",
        ),
    ),
    "Why: latency and decompositions under the strictest pressure": (
        ("latency", "Mean per-batch latency: ē (light) and ℓ̄ (solid) against λ, labelled with δ̄/λ"),
    ),
    "What a larger budget buys": (("pareto", "Amortised utility against the overhead spent (filled: efficient points)"),),
    "Adapt less, serve more: sparse-adaptation policies": (
        (
            "policy_rates",
            "Pooled utility against the adaptation rate (share of batches that changed the model), one panel "
            "per scenario, one line per method through its policies (ringed: the method's best variant)",
        ),
    ),
}


def _table_markdown(name: str, t: pl.DataFrame | None, group: dict, hx: str, why: str) -> list[str]:
    spec = TABLES[name]
    head = [f"{hx}# {spec.title}", "", f"*{spec.paper} · `tables/{name}.csv`.* {spec.how_to_read}", ""]
    if t is None:
        return head + [f"_Not in this report: {why}._", ""]
    t = filter_group(t, group)
    if not t.height:
        return head + [
            "_No rows for this group: its results lack what this table compares (offline and "
            "temporal scenarios of the same methods and episodes)._",
            "",
        ]
    headers, rows = formatted_rows(spec, t)
    extra = []
    if name in ("discrete_decomposition", "continuous_decomposition", "amortised_decomposition"):
        extra = [f"Scenario: {an.format_value(name.split('_')[0], t.get_column('value').first())}, pooled over episodes.", ""]
    return head + extra + [markdown_table(headers, rows), ""]


def _group_figures(inp, group, computed, fig_dir, prefix, all_episodes, episodes) -> dict[str, tuple[Path, Path]]:
    from tempora_sim import figures as fg

    u = filter_group(inp.pooled, group)
    label = group_label(group)
    made: dict[str, tuple[Path, Path]] = {}
    w, wc = computed["winners"], computed["win_counts"]
    if w is not None and filter_group(w, group).height:
        made["winners"] = tuple(
            fg.save(fg.winners_grid(filter_group(w, group), filter_group(wc, group), label), fig_dir, prefix + "winners")
        )
    eps_all = an.episode_order(u.get_column("episode").unique().to_list())
    if episodes:
        missing = [e for e in episodes if e not in eps_all]
        if missing:
            raise ReportError(f"episode(s) {', '.join(missing)} not in the results; episodes: {', '.join(eps_all)}")
        chosen = list(episodes)
    else:
        chosen = eps_all if all_episodes else an.representative_episodes(eps_all)
    if chosen and u.filter(pl.col("protocol") != "offline").height:
        made["curves"] = tuple(fg.save(fg.utility_curves(u, chosen, an.method_order(u), label), fig_dir, prefix + "curves"))
    lat = computed["latency"]
    if lat is not None and filter_group(lat, group).height:
        made["latency"] = tuple(fg.save(fg.latency_bars(filter_group(lat, group), label), fig_dir, prefix + "latency"))
    par = computed["pareto"]
    if par is not None and filter_group(par, group).height:
        made["pareto"] = tuple(fg.save(fg.pareto_plot(filter_group(par, group), label), fig_dir, prefix + "pareto"))
    pol = computed["policies"]
    if pol is not None and filter_group(pol, group).height:
        points = filter_group(an.policy_points(inp.pooled, inp.trace_rows), group)
        made["policy_rates"] = tuple(fg.save(fg.policy_rates(points, filter_group(pol, group), label), fig_dir, prefix + "policy-rates"))
    return made
