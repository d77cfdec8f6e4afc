"""What a report is computed from: the sweep's utility table and, from traces, their per-batch
times (``ReportInputs``), loaded from sweep results or from traces swept on the spot.

``load_inputs(source, …)`` accepts either sweep results (a directory holding
``utility.parquet``, or that file) or traces (anything else: files or directories of trace
Parquet files), in which case it runs the sweep first. The latency table and the budget
actually spent need the traces' per-batch times; from results alone they are left out and the
report says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import polars as pl

from tempora_sim import analyses as an
from tempora_sim.errors import SimError
from tempora_sim.reporting.scenarios import scenario_sweeps, split
from tempora_sim.sweeps.options import ResolvedOptions, SweepOptions
from tempora_sim.sweeps.replay import run_sweep
from tempora_sim.sweeps.traces import check_out_outside, load_traces
from tempora_sim.uncertainty import bootstrap as st
from tempora_sim.uncertainty import timing_replicates
from tempora_sim.uncertainty.term_intervals import ALL_TERMS, attach_bounds, pooled_bounds
from tempora_sim.uncertainty.timing_replicates import replicates_of

RESULTS_FILE = "utility.parquet"
#: The traces' per-batch times, kept beside the results of a report made from traces.
TRACE_TIMES_FILE = "trace_times.parquet"


class ReportError(SimError, ValueError):
    """Bad report input (message is the whole story, shown as one line)."""


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
    #: the loaded traces and the sweep options they were swept with, as given and resolved
    #: (traces only): the interactive page (explore.html) replays them on its own dense grids
    traceset: object | None = None
    sweep_options: SweepOptions | None = None
    resolved_options: ResolvedOptions | None = None
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
        """Timing replicates of the sweep (:mod:`tempora_sim.sweeps.variability`), or None: results
        read without their traces, or ``--timing-replicates 0``."""
        if "timing" not in self._cache:
            self._cache["timing"] = (
                replicates_of(self.sweep_result, self.bootstrap.timing_replicates, self.bootstrap.seed, measures=ALL_TERMS)
                if self.sweep_result is not None
                else None
            )
        return self._cache["timing"]

    def term_bounds(self) -> pl.DataFrame | None:
        """Bounds of U and every decomposition term of the pooled rows (tempora_sim.uncertainty.term_intervals)."""
        if "term_bounds" not in self._cache:
            self._cache["term_bounds"] = pooled_bounds(self.utility, self.bootstrap, self.timing())
        return self._cache["term_bounds"]

    def with_bounds(self, t: pl.DataFrame) -> pl.DataFrame:
        """A pooled table with ``<term>_lo``/``<term>_hi`` columns joined (where it has the keys)."""
        if not {"method", "protocol", "value"} <= set(t.columns):
            return t
        return attach_bounds(t, self.term_bounds())

    def timing_line(self) -> str:
        """One sentence on what the intervals include about time (docs/design/statistics.md)."""
        return timing_replicates.describe(self.timing(), self.bootstrap.timing_replicates)


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
    :class:`~tempora_sim.sweeps.options.SweepOptions` or a dict of its fields). ``out``, the report
    directory to be written, must not lie inside a trace directory. ``bootstrap`` sets the
    intervals' level, resamples and seed. ``scenarios`` also replays the traces under bursty
    arrivals and the combined protocols (docs/design/design.md §9) for their own section."""
    inp = _load_inputs(sources, sweep_options, out, scenarios)
    if bootstrap is not None:
        inp.bootstrap = bootstrap
    paper, scen = split(inp.utility)
    if scen.height:
        inp.utility = paper
        inp.scenarios = scen if inp.scenarios is None else pl.concat([scen, inp.scenarios], how="diagonal_relaxed")
    return inp


def _load_inputs(sources, sweep_options, out, scenarios: bool = False) -> ReportInputs:
    if not isinstance(sweep_options, SweepOptions):
        sweep_options = SweepOptions.build(**(sweep_options or {}))
    resolved = sweep_options.resolve()  # every option checked before anything is read, once
    items = [sources] if isinstance(sources, (str, Path)) else list(sources)
    if not items:
        raise ReportError("no results or traces given")
    for item in items:
        if not Path(item).exists():
            raise ReportError(f"{item}: no such file or directory")
    results = [results_path(i) for i in items]
    if all(r is not None for r in results):
        if sweep_options.given():
            given = ", ".join(sorted(sweep_options.given()))
            raise ReportError(f"sweep options ({given}) apply to traces, but {items[0]} holds sweep results")
        try:
            utility = pl.concat([pl.read_parquet(r) for r in results], how="diagonal_relaxed")
        except Exception as exc:  # noqa: BLE001 - any unreadable file is a one-line user error
            raise ReportError(f"{results[0]}: not a readable utility table ({exc})") from None
        if scenarios:
            raise ReportError("--scenarios replays traces; these are sweep results (their scenario rows, if any, are reported anyway)")
        an.check_utility_table(split(utility)[0])
        # a report directory keeps the traces' per-batch times beside its results
        times = [r.parent / TRACE_TIMES_FILE for r in results]
        rows = None
        if all(t.is_file() for t in times):
            rows = an.align_group_dtypes(pl.concat([pl.read_parquet(t) for t in times], how="diagonal_relaxed"), utility)
        return ReportInputs(utility=utility, trace_rows=rows, source=", ".join(map(str, items)))
    if any(r is not None for r in results):
        raise ReportError("give either sweep results or traces, not both")
    if out is not None:
        check_out_outside(items, out)
    traces = load_traces(items if len(items) > 1 else items[0])
    result = run_sweep(traces, resolved)
    utility = result.frame
    rows = an.align_group_dtypes(an.trace_rows(traces.traces), utility)
    extra = None
    if scenarios:
        extra = scenario_sweeps(traces, sweep_options)
    return ReportInputs(
        utility=utility,
        trace_rows=rows,
        source=", ".join(map(str, items)),
        from_traces=True,
        scenarios=extra,
        traceset=traces,
        sweep_options=sweep_options,
        resolved_options=resolved,
        sweep_result=result,
    )
