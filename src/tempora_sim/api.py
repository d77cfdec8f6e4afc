"""The simulator as a library: every answer the commands give, as a function a notebook calls.

Each function takes what its command takes — trace files or folders, and the sweep's options as
keyword arguments (the fields of :class:`~tempora_sim.sweeps.options.SweepOptions`: ``protocols``,
``rho``, ``T_ms``, ``B_ms``, ``lambda_ms``, ``queue`` …) — and returns polars DataFrames or a
small result object instead of printing. Bad input raises the same one-line errors the
commands print (subclasses of :class:`~tempora_sim.errors.SimError`); the simulator's
warnings are :class:`~tempora_sim.sweeps.replay.SimWarning` (``warnings``), never printed.

``from tempora_sim import api as ts`` reaches them all: ``ts.sweep``, ``ts.report``,
``ts.advise``, ``ts.explore``, ``ts.validate``, ``ts.read_traces`` (docs/guide/python-api.md).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Union

import polars as pl

from tempora_sim.sweeps.options import SweepOptions
from tempora_sim.sweeps.replay import sweep
from tempora_sim.sweeps.traces import TraceSet, load_traces
from tempora_sim.uncertainty.bootstrap import BootstrapOptions
from tempora_sim.validation.tolerances import Tolerances

__all__ = ["sweep", "report", "advise", "explore", "validate", "read_traces", "Advice"]

#: A trace file, a folder searched recursively for ``*.parquet``, or several of them.
Source = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]


def _paths(source: Source | TraceSet) -> list[str]:
    if isinstance(source, TraceSet):  # read again through the trace cache
        return [os.fspath(t.path) for t in source.traces]
    if isinstance(source, (str, os.PathLike)):
        return [os.fspath(source)]
    return [os.fspath(s) for s in source]


def read_traces(source: Source) -> TraceSet:
    """Load and check every trace under ``source``; ``.traces`` holds each one (``.meta``,
    ``.rows`` as a DataFrame, ``.group``), ``.groups()`` the comparison groups. Any function
    here takes the result in place of paths, so a folder is read once."""
    paths = _paths(source)
    return load_traces(paths if len(paths) > 1 else paths[0])


def report(
    source: Source,
    out: str | os.PathLike,
    *,
    all_episodes: bool = False,
    episodes: Sequence[str] | None = None,
    scenarios: bool = False,
    figures: bool = True,
    explore: bool = True,
    bootstrap: BootstrapOptions | None = None,
    **options: Any,
):
    """Write the report ``tempora-sim report`` writes into ``out`` (report.md, tables/*.csv,
    figures, explore.html) and return its :class:`~tempora_sim.reporting.ReportResult` (the paths
    written and the seconds each part took). ``source``: traces (swept first with
    ``options``) or a sweep's results folder. ``tempora_sim.reporting.compute_table`` answers a
    single table as a DataFrame without writing anything."""
    from tempora_sim import reporting as rp  # the analyses load on first use

    rp_opts = SweepOptions.build(**options)
    inputs = rp.load_inputs(_paths(source), rp_opts, out, bootstrap, scenarios)
    return rp.build_report(
        inputs, out, all_episodes=all_episodes, episodes=list(episodes) if episodes else None, figures=figures, explore=explore
    )


class Advice(list):
    """``advise``'s answer: one dict per comparison group (what ``--format json`` prints), and
    :meth:`frame` and :meth:`lines` to read it as a table or as the command's sentences."""

    def __init__(self, items, constraint):
        super().__init__(items)
        self.constraint = constraint

    def frame(self) -> pl.DataFrame:
        """One row per group: the recommended method, its utility and interval, the runner-up,
        the lead and its interval, whether the lead is certain, and the timing sentence."""
        rows = []
        for a in self:
            rows.append(
                {
                    "group": " · ".join(f"{v}" for v in a["group"].values()),
                    "recommended": a["recommended"],
                    "utility": a["utility"],
                    "utility_lo": a["utility_ci"][0],
                    "utility_hi": a["utility_ci"][1],
                    "runner_up": a["runner_up"],
                    "lead": a["lead"],
                    "lead_lo": a["lead_ci"][0],
                    "lead_hi": a["lead_ci"][1],
                    "certain": a["certain"],
                    "timing_uncertainty": a["timing_uncertainty"],
                }
            )
        return pl.DataFrame(rows, infer_schema_length=None)

    def lines(self) -> list[str]:
        """The sentences ``tempora-sim advise`` prints."""
        from tempora_sim.analyses.advice import text_lines

        return text_lines(list(self), self.constraint)


def advise(
    source: Source,
    *,
    rho: float | str | None = None,
    gamma_ms: float | str | None = None,
    T: float | str | None = None,
    B: float | str | None = None,
    budget_rule: str = "strict",
    idle_effect: bool = True,
    bootstrap: BootstrapOptions | None = None,
) -> Advice:
    """Which method to deploy at one constraint (``rho`` or ``gamma_ms``, ``T``, ``B``; one or
    two of them, as ``tempora-sim advise`` takes them: ``rho="70%"``, ``T="500ms"``), per
    comparison group, with its certainty and how far the constraint can move before the
    answer changes. ``idle_effect=False`` replays without the measured idle effect."""
    from tempora_sim.analyses.advice import advise as _advise
    from tempora_sim.analyses.advice import parse_constraint

    def text(v):
        return None if v is None else str(v)

    c = parse_constraint(text(rho), text(gamma_ms), text(T), text(B))
    sweep_opts = {"budget_rule": budget_rule, **({} if idle_effect else {"no_idle_effect": True})}
    src = source if isinstance(source, TraceSet) else _paths(source)
    return Advice(_advise(src, c, bootstrap or BootstrapOptions(), sweep_opts), c)


def explore(
    source: Source,
    out: str | os.PathLike,
    *,
    arrivals: Sequence[str] = (),
    bootstrap: BootstrapOptions | None = None,
    progress: bool = False,
    **options: Any,
) -> Path:
    """Write the interactive page ``tempora-sim explore`` writes (one offline HTML file) and
    return its path. Without ``protocols``, every protocol and the combined ones, as the
    command does."""
    from tempora_sim.exploration.page import DEFAULT_PROTOCOLS, build_page_data, check_out_file, write_page

    sweep_options = SweepOptions.build(**options)
    if "protocols" not in sweep_options.given():
        sweep_options = SweepOptions.build(sweep_options, protocols=DEFAULT_PROTOCOLS)
    path = check_out_file(os.fspath(out))
    data = build_page_data(
        [Path(p) for p in _paths(source)], sweep_options, tuple(arrivals), bootstrap or BootstrapOptions(), progress=progress
    )
    return write_page(data, path)


def validate(live: Source, traces: Source, tolerances: Tolerances | None = None, *, sandwich: Source | None = None, **tolerance: float):
    """Put every live run under ``live`` (files from ``tempora-trace live``) beside the replay
    of its trace under ``traces``; returns a :class:`~tempora_sim.validation.live_runs.Validation`:
    ``.settings`` (one row per setting: live and replay, the clock check, coverage), ``.runs``,
    ``.disagreements`` and ``.passed``. Tolerances as :class:`~tempora_sim.validation.tolerances.Tolerances`
    or its fields (``abs_pp``, ``clock_pct`` …). ``sandwich``: the same configurations traced on
    the other side of the live runs, for the sandwich's clock check (``--sandwich``)."""
    from tempora_sim.validation.live_runs import validate as _validate

    tol = tolerances if tolerances is not None else Tolerances(**tolerance)

    def read(source: Source | TraceSet) -> TraceSet:
        return source if isinstance(source, TraceSet) else read_traces(source)

    return _validate(_paths(live), read(traces), tol, None if sandwich is None else read(sandwich))
