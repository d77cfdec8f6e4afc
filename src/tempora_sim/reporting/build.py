"""``build_report``: report.md (summary, every table, the figures), ``tables/*.csv``,
``figures/*.{png,pdf}`` and, from traces, the interactive page, in one directory published whole.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import polars as pl

from tempora_schema.prediction import is_predicted, prediction_error
from tempora_sim import analyses as an
from tempora_sim import protocols as P
from tempora_sim.reporting.devices import markdown as devices_markdown
from tempora_sim.reporting.groups import filter_group, group_label, groups_of
from tempora_sim.reporting.inputs import RESULTS_FILE, TRACE_TIMES_FILE, ReportError, ReportInputs
from tempora_sim.reporting.markdown import (
    csv_frame,
    formatted_rows,
    markdown_table,
    md_code,
    md_frame,
    md_name,
    slug,
)
from tempora_sim.reporting.registry import TABLES, compute_table, why_missing
from tempora_sim.reporting.scenarios import markdown as scenarios_markdown
from tempora_sim.reporting.sentences import summary_lines
from tempora_sim.sweeps.options import SweepOptions
from tempora_toolkit.atomic_files import check_output_dir, staged_dir, to_bytes, write_file

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
#: Rows of the scenarios beyond the paper's (bursty arrivals, combined protocols), when present.
SCENARIOS_FILE = "scenarios.parquet"
#: What a report writes into its folder (checked for clashes before any work).
REPORT_FOLDERS = ("tables", "figures")
#: the interactive page (tempora-sim explore), written beside report.md when traces were given
EXPLORE_FILE = "explore.html"
REPORT_FILES = ("report.md", RESULTS_FILE, TRACE_TIMES_FILE, SCENARIOS_FILE, EXPLORE_FILE)


def _seeds_of(pooled: pl.DataFrame, group: dict) -> str:
    """' · seeds 2025, 2026 (pooled)' or ' · seed 2025' for a group of the seed-pooled table."""
    if an.SEEDS not in pooled.columns:
        return ""
    seeds = sorted(set(", ".join(filter_group(pooled, group).get_column(an.SEEDS).unique().to_list()).split(", ")))
    return f" · seed {seeds[0]}" if len(seeds) == 1 else f" · seeds {', '.join(seeds)} (pooled)"


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
        f"Source: {md_code(inp.source)} ({'traces, swept for this report' if inp.from_traces else 'sweep results'}). "
        "Utilities and accuracies are in %, times in ms. Every table is also in `tables/<name>.csv` "
        "(all groups, fractions rather than %).",
        "",
    ]
    predicted = [t for t in inp.traceset.traces if is_predicted(t.meta)] if inp.traceset is not None else []
    if predicted:
        sd = max(prediction_error(t.meta)[0] for t in predicted)
        md += [
            f"**Predicted times.** {len(predicted)} of {len(inp.traceset.traces)} traces are predicted (their device is marked "
            '"(predicted)"): accuracy from a trace taken on another device, times from a transfer model fitted on a profile of '
            f"this device (`tempora-sim predict`); their intervals include the transfer's held-out error (σ up to {sd:.1%}). "
            "`tempora-sim validate-prediction` measures how far such predictions carry against full traces.",
            "",
        ]
    if explore and inp.traceset is not None and _temporal(inp):
        # the page and its renderer load only when a page is written (tempora_sim.exploration.page)
        from tempora_sim.exploration.data import build_data
        from tempora_sim.exploration.page import DEFAULT_PROTOCOLS, render_page

        t_explore = time.perf_counter()
        sweep_options = inp.sweep_options or SweepOptions()
        if "protocols" not in sweep_options.given():
            sweep_options = SweepOptions.build(sweep_options, protocols=DEFAULT_PROTOCOLS)  # the page moves both pressures at once too
        data = build_data(inp.traceset, sweep_options, (sweep_options.arrivals,), inp.bootstrap, source=inp.source)
        write_file(out / EXPLORE_FILE, render_page(data))
        seconds["explore"] = time.perf_counter() - t_explore
        md += [
            f"**Interactive:** [{EXPLORE_FILE}]({EXPLORE_FILE}) moves ρ, T and B (and both pressures at once) over dense "
            "grids and shows the winners, intervals and recommendation at every value; it opens offline in any browser.",
            "",
        ]
    t1 = time.perf_counter()
    if figures:  # matplotlib loads only when figures are drawn (`show` and `sweep` never need it)
        from tempora_sim.reporting.figures import group_figures
    for gi, group in enumerate(groups):
        # figure names: the group values that tell the groups apart, e.g. "cpu-other-winners.png"
        prefix = (f"{gi + 1}-" + (f"{slug('-'.join(str(group[k]) for k in varying))}-" if varying else "")) if multi else ""
        hx = "##" if not multi else "###"
        seeds = _seeds_of(inp.pooled, group)
        if multi:
            md += [f"## Group {gi + 1}: {md_name(group_label(group))}{seeds}", ""]
        else:
            md += [f"Group: {md_name(group_label(group))}{seeds}.", ""]
        md += [f"{hx} Summary", ""] + [f"- {s}" for s in summary_lines(inp, group)] + [""]
        figs = group_figures(inp, group, computed, out / "figures", prefix, all_episodes, episodes) if figures else {}
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
            md += scenarios_markdown(md_frame(filter_group(inp.utility, group)), md_frame(filter_group(inp.scenarios, group)), hx)
    md += devices_markdown(md_frame(inp.utility))  # device, model and method names escaped for Markdown
    seconds["figures+markdown"] = time.perf_counter() - t1
    report = out / "report.md"
    write_file(report, ("\n".join(md).rstrip() + "\n").encode("utf-8"))
    seconds["total"] = time.perf_counter() - t0
    return ReportResult(report, table_paths, fig_paths, seconds)


def _temporal(inp: ReportInputs) -> bool:
    """Do the report's sweep options ask for a temporal protocol (what the page moves)? Read
    from the options resolved when the traces were swept."""
    given = inp.sweep_options.given() if inp.sweep_options is not None else {}
    resolved = inp.resolved_options
    return "protocols" not in given or resolved is None or any(P.get(p).grids for p in resolved.protocols)


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
    headers, rows = formatted_rows(spec, md_frame(t))  # every name from the data escaped for Markdown
    extra = []
    if name in ("discrete_decomposition", "continuous_decomposition", "amortised_decomposition"):
        extra = [f"Scenario: {an.format_value(name.split('_')[0], t.get_column('value').first())}, pooled over episodes.", ""]
    return head + extra + [markdown_table(headers, rows), ""]
