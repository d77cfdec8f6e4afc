"""What ``tempora-sim validate`` prints: one row per live setting (live vs replay α, |Q|, served
accuracy, utility, the differences in pp, the run-to-run spread and the self-consistency of each
run), the sentences under the table, and the self-consistency disagreements.

Apart from :mod:`tempora_sim.validation.live_runs` because it loads rich, which the command line imports
only when ``validate`` runs.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import polars as pl
from rich import box
from rich.console import Console
from rich.table import Table

from tempora_schema import PROBE_DRIFT_LIMIT
from tempora_sim import protocols as P
from tempora_sim.reporting.terminal import term_name
from tempora_sim.uncertainty.coverage import describe, overall
from tempora_sim.validation.live_runs import Validation


def validation_console() -> Console:
    """The console the table is printed on: the terminal's width, or 220 columns into a file
    or pipe (the table stays one row per setting)."""
    return Console(width=None if sys.stdout.isatty() else 220)


#: Above this |δ Δ%| the summary says the machine, not the replay, moved the figures.
CLOCK_GAP_NOTE_PCT = 5.0


def _f(x, digits: int = 2, scale: float = 100.0, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    v = x * scale
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"


def _split(disc) -> str:
    """Occupancy beyond δ of events taken straight after the previous one (the runner's own
    work) and of events taken after a wait (plus the lag of waking up)."""
    busy, waited = disc["overhead_back_to_back_us"].drop_nulls(), disc["overhead_after_wait_us"].drop_nulls()
    parts = []
    if busy.len():
        parts.append(f"{busy.mean():.0f} µs back to back")
    if waited.len():
        parts.append(f"{waited.mean():.0f} µs after a wait, waking up included")
    return f" ({', '.join(parts)})" if parts else ""


def _clock_gap_column(settings: pl.DataFrame) -> str:
    """The gap the clock check decides on: the sandwich's when the traces on the other side of
    the live runs were given (``--sandwich``), else the trace's."""
    return "clock_gap_sandwich_pct" if "clock_gap_sandwich_pct" in settings.columns else "clock_gap_idle_pct"


def _clock_cell(row: dict, column: str) -> str:
    """The traced clock against the live one, the trace's idle effect applied; red beyond its tolerance."""
    cell = _f(row.get(column), digits=1, scale=1, signed=True)
    return cell if row.get("clock_pass", True) else f"[bold red]{cell}[/]"


def _range(values: pl.Series) -> str:
    v = values.drop_nulls()
    return f"{v.min():+.1f} to {v.max():+.1f} %" if v.len() else "–"


def _inside_lines(s: pl.DataFrame) -> list[str]:
    """One line naming every trace (each side of a sandwich) and live file whose own speed
    probes show the machine changing speed while it ran (:func:`tempora_schema.probe_drift`):
    a median probe, which the speed column compares, hides such a change."""
    limit = 100 * PROBE_DRIFT_LIMIT
    named: dict[str, float] = {}
    checked = 0
    columns = (("trace_speed_moved_pct", "trace", "--traces"), ("trace_other_speed_moved_pct", "trace_other", "--sandwich"))
    for moved_col, path_col, side in columns:
        if moved_col not in s.columns:
            continue
        for row in s.select("method", path_col, moved_col).unique(subset=[path_col], maintain_order=True).iter_rows(named=True):
            checked += row[moved_col] is not None
            if row[moved_col] is not None and row[moved_col] > limit:
                named[f"{term_name(row['method'])} {side} trace {row[moved_col]:.0f} %"] = row[moved_col]
    if "live_speed_moved_pct" in s.columns:
        runs_of = ["dataset", "model", "device", "method"]  # one live file per method of a group
        for row in s.select(*runs_of, "live_speed_moved_pct").unique(subset=runs_of, maintain_order=True).iter_rows(named=True):
            checked += row["live_speed_moved_pct"] is not None
            if row["live_speed_moved_pct"] is not None and row["live_speed_moved_pct"] > limit:
                named[f"{term_name(row['method'])} live runs {row['live_speed_moved_pct']:.0f} %"] = row["live_speed_moved_pct"]
    if not named:
        return []
    return [
        f"inside a run: the machine's speed moved by more than {limit:.0f} % (medians of three successive speed probes) "
        f"within {len(named)} of {checked} checked: {', '.join(named)}; their times mix two speeds of the machine, which "
        "no median probe shows: trace and play again while it holds its speed"
    ]


def print_validation(result: Validation, console: Console) -> None:
    """The settings table, the sentences under it (coverage, groups, clock gaps, speed,
    self-consistency) and the disagreements table."""
    s = result.settings
    runs = result.runs
    gap_col = _clock_gap_column(s)
    sandwich = gap_col == "clock_gap_sandwich_pct"
    t = Table(
        title="Live runs vs replay (pooled over episodes; %, differences in pp = replay − live)", box=box.SIMPLE_HEAD, title_justify="left"
    )
    for col in (
        "method",
        "setting",
        "runs",
        "α live",
        "α replay",
        "Δα",
        "|Q| live",
        "|Q| replay",
        "acc live",
        "acc replay",
        "U live",
        "U replay",
        "ΔU",
        "δ Δ%",
        "δ Δ% sandwich" if sandwich else "δ Δ% idle",
        "δ Δ% speed",
        "Δα @live δ",
        "ΔU @live δ",
        "spread α/U",
        "tol α/U",
        "self %",
        "ok",
    ):
        t.add_column(col, justify="left" if col in ("method", "setting") else "right")
    for row in s.iter_rows(named=True):
        disc = P.get(row["protocol"]).serves_subset
        if disc:
            setting = f"λ={row['lambda_ms']:.4g}ms ρ={row['rho'] * 100:.4g}% b={row['queue']}"
            mine = runs.filter(
                (pl.col("method") == row["method"])
                & (pl.col("protocol") == row["protocol"])
                & ((pl.col("lambda_ms") - row["lambda_ms"]).abs() < 1e-9)
                & ((pl.col("rho") - row["rho"]).abs() < 1e-9)
                & (pl.col("queue") == row["queue"])
            )
            agree = mine["agreement_pct"].drop_nulls()
            self_pct = f"{agree.min():.2f}" if agree.len() else "–"
            cells = [
                _f(row["alpha_live"]),
                _f(row["alpha_replay"]),
                _f(row["delta_alpha_pp"], scale=1, signed=True),
                f"{row['served_live']:.1f}",
                f"{row['served_replay']}",
                _f(row["served_acc_live"]),
                _f(row["served_acc_replay"]),
            ]
        else:
            setting = (
                f"λ={row['lambda_ms']:.4g}ms B={row['budget_ms']:g}ms {row['budget_rule']} m {row['m_live']:.1f}/{row['m_replay']:.1f}"
            )
            self_pct = "–"
            cells = ["–"] * 7
        # α's spread and tolerance beside U's: on random weights (timing only) U is ~0 and
        # only α says anything
        spread = f"{_f(row.get('spread_alpha_pp') if disc else None, scale=1)}/{_f(row.get('spread_utility_pp'), scale=1)}"
        tol = f"{_f(row.get('tolerance_alpha_pp') if disc else None, scale=1)}/{_f(row['tolerance_pp'], scale=1)}"
        t.add_row(
            term_name(row["method"]),
            setting,
            str(row["runs"]),
            *cells,
            _f(row["utility_live"]),
            _f(row["utility_replay"]),
            _f(row["delta_utility_pp"], scale=1, signed=True),
            _f(row["clock_gap_pct"], digits=1, scale=1, signed=True),
            _clock_cell(row, gap_col),
            _f(row.get("clock_gap_speed_pct"), digits=1, scale=1, signed=True),
            _f(row.get("delta_alpha_live_speed_pp"), scale=1, signed=True),
            _f(row["delta_utility_live_speed_pp"], scale=1, signed=True),
            spread,
            tol,
            self_pct,
            "yes" if row["pass"] and row.get("clock_pass", True) else "[bold red]NO[/]",
        )
    console.print(t)
    console.print(describe(overall(s)))
    groups = s.select("dataset", "model", "device").unique(maintain_order=True)
    for g in groups.iter_rows(named=True):
        mine = s.filter((pl.col("dataset") == g["dataset"]) & (pl.col("model") == g["model"]) & (pl.col("device") == g["device"]))
        lams = mine["lambda_ms"].unique(maintain_order=True).to_list()
        paired = int(mine["trace_alongside"].sum())
        fewest = int(mine["num_batches"].min())
        console.print(
            f"group {term_name(g['dataset'])} · {term_name(g['model'])} · {term_name(g['device'])} · λ = {', '.join(f'{x:.2f}' for x in lams)} ms "
            f"(m: mean per episode, live/replay); traces taken alongside the live runs: {paired} of {mine.height} settings; "
            f"one batch is {100 / fewest:.2f} pp of α at {fewest} batches per run",
            style="dim",
        )
    if "clock_pass" in s.columns and s.height:
        off = s.filter(~pl.col("clock_pass"))
        traced = (
            "the geometric mean of the traces on both sides of the live runs, idle effect applied, column δ Δ% sandwich"
            if sandwich
            else "idle effect applied, column δ Δ% idle"
        )
        spread = "the two traces' pass-to-pass spread, of their mean" if sandwich else "the trace's own pass-to-pass spread"
        line = (
            f"clock: traced δ ({traced}) within tolerance of the live δ in {s.height - off.height} of "
            f"{s.height} setting(s) (tolerance: {s['clock_tolerance_pct'].min():.1f}–{s['clock_tolerance_pct'].max():.1f} %, "
            f"the larger of --clock-tol-pct and {spread})"
        )
        if off.height:
            worst = off.sort(pl.col(gap_col).abs(), descending=True).row(0, named=True)
            line += f"; beyond it: {off.height} (worst: {term_name(worst['method'])}, {worst[gap_col]:+.1f} %)"
        console.print(line, style="red" if off.height else None)
        if sandwich:
            console.print(
                f"clock, each side alone: --traces {_range(s['clock_gap_idle_pct'])}, --sandwich "
                f"{_range(s['clock_gap_idle_other_pct'])} against the live δ",
                style="dim",
            )
        loose = s.filter(pl.col("clock_pass_on_spread")) if "clock_pass_on_spread" in s.columns else s.clear()
        if loose.height:
            whose = "their two traces' spread" if sandwich else "their trace's own spread"
            console.print(
                f"clock, inconclusive: {loose.height} of them pass only on {whose} (gaps "
                f"{loose[gap_col].min():+.1f} to {loose[gap_col].max():+.1f} %, beyond --clock-tol-pct, "
                f"within a spread of up to {loose['clock_tolerance_pct'].max():.1f} %): a trace that noisy cannot tell the clocks "
                "apart; trace and play again while the machine holds its speed",
                style="yellow",
            )
        probed = s.filter(pl.col("clock_gap_speed_pct").is_not_null()) if "clock_gap_speed_pct" in s.columns else s.clear()
        if probed.height:
            moved = probed.filter(pl.col("speed_gap_pct").abs() > pl.col("clock_tolerance_pct"))
            line = (
                f"machine speed: by the speed probe the machine ran {probed['speed_gap_pct'].min():+.1f} to "
                f"{probed['speed_gap_pct'].max():+.1f} % slower while tracing than during the live runs (+ = slower; column "
                "δ Δ% speed: the clocks compared at one speed by the probe's ratio)"
            )
            if moved.height:
                line += (
                    f"; in {moved.height} of {probed.height} setting(s) it moved by more than the tolerance, so their gaps "
                    "are the machine's as much as the tracer's: trace and play again while it holds its speed"
                )
            console.print(line, style="yellow" if moved.height else "dim")
        for line in _inside_lines(s):
            console.print(line, style="yellow")
    gaps = s.filter(pl.col("clock_gap_pct").abs() > CLOCK_GAP_NOTE_PCT)
    if gaps.height:
        worst = gaps.sort(pl.col("clock_gap_pct").abs(), descending=True).row(0, named=True)
        console.print(
            f"note: in {gaps.height} setting(s) the trace's events took more than {CLOCK_GAP_NOTE_PCT:g} % longer or shorter "
            f"than the live ones (worst: {term_name(worst['method'])}, {worst['clock_gap_pct']:+.1f} %); the replay is exact for the "
            "times it is given, so that part of Δ comes from the times themselves (the machine's speed, idle waits), not from the replay"
            + ("" if gaps["trace_alongside"].all() else " (traces taken alongside, --trace-alongside, take drift out)"),
            style="yellow",
        )
    if s.height:
        worst_a = s["delta_alpha_live_speed_pp"].abs().max() if "delta_alpha_live_speed_pp" in s.columns else None
        worst_u = s["delta_utility_live_speed_pp"].abs().max()
        console.print(
            "at the live events' speed (each trace's event times × the live/trace ratio of mean δ, columns @live δ): "
            + (f"largest |Δα| {worst_a:.2f} pp, " if worst_a is not None else "")
            + f"largest |ΔU| {worst_u:.2f} pp. This says how much of Δ the speed difference explains; "
            "the tolerances are checked on the replay as traced",
            style="dim",
        )
    disc = runs.filter(pl.col("protocol").is_in([n for n in P.live() if P.get(n).serves_subset]))
    if disc.height:
        console.print(
            f"self-consistency: {disc.height} discrete run(s), identical decisions {disc['agreement_pct'].min():.2f}–"
            f"{disc['agreement_pct'].max():.2f}% (replaying δ = e + ℓ alone: {disc['agreement_delta_only_pct'].min():.2f}–"
            f"{disc['agreement_delta_only_pct'].max():.2f}%); pipeline occupancy beyond δ "
            f"{disc['overhead_us'].mean():.0f} µs per event on average" + _split(disc)
        )
    dis = result.disagreements
    if dis.height:
        d = Table(title="Self-consistency disagreements", box=box.SIMPLE_HEAD, title_justify="left")
        for col in ("file", "run", "episode", "batch", "live", "replay", "margin µs", "near tie"):
            d.add_column(col)
        for r in dis.head(50).iter_rows(named=True):
            d.add_row(
                Path(r["file"]).name,
                str(r["run"]),
                r["episode"],
                str(r["step"]),
                "served" if r["live_served"] else "skipped",
                "served" if r["replay_served"] else "skipped",
                f"{r['margin_us']:.3f}",
                "yes" if r["near_tie"] else "[bold red]no[/]",
            )
        console.print(d)
        if dis.height > 50:
            console.print(f"… and {dis.height - 50} more (see validation-disagreements.csv with --out)")
    else:
        console.print("self-consistency disagreements: none")
