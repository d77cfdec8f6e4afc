"""Figures for the report (matplotlib, PNG + PDF).

Figures are plain ``matplotlib.figure.Figure`` objects rendered by the Agg/PDF canvases, never
through pyplot: no global backend switch, no display needed, nothing left open.

Each method keeps one colour in every figure (:mod:`tempora_sim.palette`).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Sequence

import polars as pl
from matplotlib import rc_context
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from tempora_schema.policies import split_label
from tempora_sim import analyses as an
from tempora_sim import protocols as P
from tempora_sim.analyses.cells_and_orders import episode_order
from tempora_sim.palette import method_colour
from tempora_sim.reporting.groups import filter_group, group_label
from tempora_sim.reporting.inputs import ReportError
from tempora_toolkit.atomic_files import to_bytes, write_file

DPI = 150
TIE_COLOUR = "#ffffff"
BELOW_GREY = "#c8c8c8"
WIN_GREEN = "#2ca02c"


def method_label(method: str, width: int = 8) -> str:
    """Short cell label for the winners grid."""
    return method if len(method) <= width else method[: width - 1] + "."


def _subplots(*args, figsize, **kwargs):
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(*args, **kwargs)


def save(fig, out_dir: Path, name: str) -> list[Path]:
    """Write ``name``.png (dpi 150) and ``name``.pdf without timestamps (reproducible bytes)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    png, pdf = out_dir / f"{name}.png", out_dir / f"{name}.pdf"
    # Layouts are fixed by tight_layout when the figure is built; bbox_inches="tight" would
    # redraw every figure once more per file, doubling the report's plotting time. Rendered in
    # memory, written atomically (as every Tempora output).
    write_file(png, to_bytes(lambda f: fig.savefig(f, format="png", dpi=DPI, metadata={"Software": None})))
    write_file(pdf, to_bytes(lambda f: fig.savefig(f, format="pdf", metadata={"CreationDate": None, "Producer": None, "Creator": None})))
    return [png, pdf]


def _wrap(title: str, width: int = 80) -> str:
    """Group labels are long; wrap them at the ' · ' separators so titles fit the figure."""
    return "\n".join(textwrap.wrap(title, width=width, break_long_words=False))


def _pale(hex_colour: str, keep: float = 0.35) -> tuple[float, float, float]:
    """The colour mixed with white (``keep`` of the colour): uncertain cells."""
    r, g, b = to_rgb(hex_colour)
    return (1 - keep + keep * r, 1 - keep + keep * g, 1 - keep + keep * b)


def _text_colour(hex_colour: str) -> str:
    r, g, b = to_rgb(hex_colour)
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"


# ----------------------------------------------------------------------------- winners grid
def winners_grid(winners: pl.DataFrame, counts: pl.DataFrame, title: str = ""):
    """Episodes × scenarios, each cell coloured by its winner (paper Figure 1 / Table 15).
    Tied cells are white, hatched and labelled 'tie'; uncertain wins (``certain`` is False:
    the lead's paired bootstrap interval contains 0) are pale, dotted and end in '?'.
    ``winners`` and ``counts`` are one group's :func:`~tempora_sim.analyses.wins.winners` and
    :func:`~tempora_sim.analyses.wins.win_counts`."""
    scen = winners.select("scenario", "scenario_order", "protocol").unique().sort("scenario_order")
    scenarios = scen.get_column("scenario").to_list()
    protocols = scen.get_column("protocol").to_list()
    episodes = episode_order(winners.get_column("episode").unique().to_list())
    lookup = {(r["episode"], r["scenario"]): r for r in winners.iter_rows(named=True)}
    ncol, nrow = len(scenarios), len(episodes)
    fig, ax = _subplots(figsize=(2.6 + 0.62 * ncol, 1.6 + 0.34 * nrow))
    for i, ep in enumerate(episodes):
        for j, sc in enumerate(scenarios):
            r = lookup.get((ep, sc))
            if r is None:
                ax.add_patch(Rectangle((j, i), 1, 1, facecolor="#f0f0f0", edgecolor="white"))
                continue
            if r["n_winners"] > 1:
                ax.add_patch(Rectangle((j, i), 1, 1, facecolor=TIE_COLOUR, edgecolor="#999999", hatch="///", lw=0.5))
                ax.text(j + 0.5, i + 0.5, "tie", ha="center", va="center", fontsize=6.5)
            elif r.get("certain") is False:
                # uncertain win: the method's colour washed out, dotted, and a '?' after the name
                col = _pale(method_colour(r["winner"]))
                ax.add_patch(Rectangle((j, i), 1, 1, facecolor=col, edgecolor="#777777", hatch="....", lw=0.3))
                ax.text(
                    j + 0.5,
                    i + 0.5,
                    method_label(r["winner"], 7) + "?",
                    ha="center",
                    va="center",
                    fontsize=6.5,
                    color="black",
                    style="italic",
                )
            else:
                col = method_colour(r["winner"])
                ax.add_patch(Rectangle((j, i), 1, 1, facecolor=col, edgecolor="white", lw=1))
                ax.text(j + 0.5, i + 0.5, method_label(r["winner"]), ha="center", va="center", fontsize=6.5, color=_text_colour(col))
    # protocol separators and headers
    prev = None
    for j, p in enumerate(protocols):
        if p != prev and j:
            ax.axvline(j, color="black", lw=1.2)
        prev = p
    for p in dict.fromkeys(protocols):
        js = [j for j, q in enumerate(protocols) if q == p]
        ax.text((js[0] + js[-1] + 1) / 2, -0.35, p, ha="center", va="bottom", fontsize=8, fontweight="bold")
    ax.set_xlim(0, ncol)
    ax.set_ylim(nrow, 0)
    ax.set_xticks([j + 0.5 for j in range(ncol)])
    ax.set_xticklabels([s.split("=", 1)[-1] if "=" in s else s for s in scenarios], fontsize=7, rotation=90)
    ax.xaxis.set_ticks_position("bottom")
    ax.set_yticks([i + 0.5 for i in range(nrow)])
    ax.set_yticklabels(episodes, fontsize=7)
    ax.tick_params(length=0)
    for s in ax.spines.values():
        s.set_visible(False)
    winners_with_counts = counts.filter(pl.col("wins") > 0)
    assessed = "certain" in counts.columns and counts.get_column("certain").is_not_null().any()
    if assessed:
        handles = [
            Patch(facecolor=method_colour(m), label=f"{m} ({w}: {c} certain)")
            for m, w, c in winners_with_counts.select("method", "wins", "certain").iter_rows()
        ]
    else:
        handles = [
            Patch(facecolor=method_colour(m), label=f"{m} ({w})") for m, w in winners_with_counts.select("method", "wins").iter_rows()
        ]
    if "certain" in winners.columns and winners.filter(pl.col("certain").eq(False) & (pl.col("n_winners") == 1)).height:
        handles.append(
            Patch(facecolor=_pale("#777777"), edgecolor="#777777", hatch="....", label="uncertain (pale, '?'):\nlead's interval contains 0")
        )
    if winners.filter(pl.col("n_winners") > 1).height:
        handles.append(Patch(facecolor=TIE_COLOUR, edgecolor="#999999", hatch="///", label="tie"))
    ax.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False, title="winner (wins)", title_fontsize=7
    )
    if title:
        ax.set_title(title, fontsize=9, pad=28)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- utility curves
def _x_of(protocol: str, values: Sequence[float]) -> list[float]:
    """Grid values as the axis draws them (ρ in %, B in s)."""
    return [P.get(protocol).grids[0].axis(v) for v in values]


def utility_curves(df: pl.DataFrame, episodes: Sequence[str], order: Sequence[str], title: str = ""):
    """Utility vs ρ, T, B (rows) for each episode (columns), one group (paper Figure 3).
    Green band: between standard inference and the best method (the winner's lead); grey band:
    below standard inference, where methods are drawn grey; winners are named along the top."""
    protos = [p for p in P.temporal() if df.filter(pl.col("protocol") == p).height]
    fig, axes = _subplots(len(protos), len(episodes), figsize=(3.1 * len(episodes) + 0.4, 2.5 * len(protos) + 0.9), squeeze=False)
    for i, proto in enumerate(protos):
        for j, ep in enumerate(episodes):
            ax = axes[i][j]
            part = df.filter((pl.col("protocol") == proto) & (pl.col("episode") == ep) & pl.col("utility").is_not_null())
            _panel(ax, part, proto, order)
            if i == 0:
                ax.set_title(ep, fontsize=9, pad=14)
            if j == 0:
                ax.set_ylabel(f"{proto}\nutility (%)", fontsize=8)
            ax.set_xlabel(P.get(proto).grids[0].axis_label, fontsize=7)
    handles = [Line2D([], [], color=method_colour(m), lw=2, ls="--" if m == an.BASELINE else "-", label=m) for m in order]
    handles += [
        Patch(facecolor=WIN_GREEN, alpha=0.15, label="lead of the best method"),
        Patch(facecolor=BELOW_GREY, alpha=0.6, label="worse than standard"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 7), fontsize=7, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.035 + 0.02 * (len(handles) // 7), 1, 0.97))
    return fig


def _panel(ax, part: pl.DataFrame, proto: str, order: Sequence[str]) -> None:
    values = sorted(set(part.get_column("value").to_list()))
    if not values:
        ax.set_visible(False)
        return
    xs = _x_of(proto, values)
    u = {(m, v): x * 100 for m, v, x in part.select("method", "value", "utility").iter_rows()}
    base = [u.get((an.BASELINE, v)) for v in values]
    best = [max((u[(m, v)] for m in order if (m, v) in u), default=None) for v in values]
    has_base = all(b is not None for b in base)
    if has_base:
        ax.fill_between(xs, 0, base, color=BELOW_GREY, alpha=0.35, lw=0)
        ax.fill_between(xs, base, best, where=[b2 >= b1 for b1, b2 in zip(base, best)], color=WIN_GREEN, alpha=0.15, lw=0, interpolate=True)
    for m in order:
        pts = [(x, u.get((m, v)), base[k]) for k, (x, v) in enumerate(zip(xs, values))]
        pts = [p for p in pts if p[1] is not None]
        if not pts:
            continue
        col = method_colour(m)
        style = "--" if m == an.BASELINE else "-"
        below = [has_base and b is not None and y < b - 1e-9 for _, y, b in pts]
        # one collection per method: grey segments/points where it is below standard
        segs = [[(pts[k][0], pts[k][1]), (pts[k + 1][0], pts[k + 1][1])] for k in range(len(pts) - 1)]
        seg_cols = [BELOW_GREY if (below[k] or below[k + 1]) else col for k in range(len(segs))]
        if segs:
            ax.add_collection(
                LineCollection(
                    segs, colors=seg_cols, linestyles=style, linewidths=1.4, zorder=2 if all(c == BELOW_GREY for c in seg_cols) else 3
                )
            )
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=9, c=[BELOW_GREY if b else col for b in below], zorder=4, linewidths=0)
    for x, v, b in zip(xs, values, best):
        win = [m for m in order if (m, v) in u and u[(m, v)] >= b - 1e-10]
        label = "tie" if len(win) > 1 else method_label(win[0])
        ax.annotate(
            label,
            (x, 1.0),
            xycoords=("data", "axes fraction"),
            ha="center",
            va="bottom",
            fontsize=5.5,
            color="black" if len(win) > 1 else method_colour(win[0]),
            rotation=45,
        )
    if P.get(proto).strictest == "max":
        ax.invert_xaxis()  # strict (high ρ) on the left, like the other rows
    if all(x > 0 for x in xs) and max(xs) / min(xs) >= 3:
        ax.set_xscale("log")  # the paper's grids are geometric (√2 in ρ, ×2 in B)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{x:g}" for x in xs], fontsize=6)
    ax.minorticks_off()
    ax.tick_params(labelsize=6)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.25, lw=0.5)


# ----------------------------------------------------------------------------- latency bars
def latency_bars(latency: pl.DataFrame, title: str = ""):
    """Stacked horizontal bars per method: ē (pickup → prediction) then ℓ̄ (prediction →
    pipeline free), with λ marked; the label is the slowdown δ̄/λ (paper Table 2)."""
    rows = list(latency.iter_rows(named=True))
    fig, ax = _subplots(figsize=(6.4, 0.9 + 0.36 * len(rows)))
    lam = rows[0]["lambda_ms"] if rows else 0.0
    for i, r in enumerate(rows):
        col = method_colour(r["method"])
        ax.barh(i, r["e_mean"], color=col, alpha=0.45, edgecolor=col)
        ax.barh(i, r["l_mean"], left=r["e_mean"], color=col, edgecolor=col)
        ax.text(r["e_mean"] + r["l_mean"], i, f"  {r['slowdown']:.2f}×", va="center", fontsize=7)
    ax.axvline(lam, color="black", ls="--", lw=1)
    ax.text(lam, -0.7, f" λ = {lam:.3g} ms", fontsize=7, va="center")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r["method"] for r in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.4, -1.0)
    ax.set_xlabel("mean per-batch latency (ms): light = ē (pickup → prediction), solid = ℓ̄ (→ pipeline free)", fontsize=8)
    xmax = max((r["e_mean"] + r["l_mean"] for r in rows), default=1.0)
    ax.set_xlim(0, xmax * 1.18)
    ax.tick_params(labelsize=7)
    ax.grid(axis="x", alpha=0.25, lw=0.5)
    if title:
        ax.set_title(_wrap(title), fontsize=8)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- Pareto
def pareto_plot(frontier: pl.DataFrame, title: str = ""):
    """Pooled amortised utility against the overhead spent (or the budget B when spent is
    unknown), per method; filled markers are the method's efficient points."""
    spent = frontier.get_column("spent_ms").is_not_null().all()
    xcol = "spent_ms" if spent else "B_ms"
    fig, ax = _subplots(figsize=(6.0, 3.6))
    methods = list(dict.fromkeys(frontier.get_column("method").to_list()))
    allx = []
    for m in methods:
        sub = frontier.filter(pl.col("method") == m).sort(xcol)
        xs = [x / 1000 for x in sub.get_column(xcol).to_list()]
        ys = [y * 100 for y in sub.get_column("utility").to_list()]
        allx += xs
        col = method_colour(m)
        ax.plot(xs, ys, color=col, lw=1.3, ls="--" if m == an.BASELINE else "-", label=m)
        for x, y, eff in zip(xs, ys, sub.get_column("efficient").to_list()):
            # efficient points on top: a budget that buys nothing more lands on the same spot
            ax.plot([x], [y], marker="o", ms=4, color=col, mfc=col if eff else "white", zorder=4 if eff else 3)
    pos = [x for x in allx if x > 0]
    if spent and pos and max(pos) / min(pos) > 8:
        # spent overhead spans decades and includes 0 (methods that never exceed λ): symlog
        lo, hi = math.floor(math.log10(min(pos))), math.ceil(math.log10(max(pos)))
        ax.set_xscale("symlog", linthresh=10.0**lo)
        ticks = ([0.0] if min(allx) <= 0 else []) + [10.0**k for k in range(lo, hi + 1)]
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{t:g}" for t in ticks])
        ax.minorticks_off()
    elif pos and max(pos) / min(pos) > 8:
        ax.set_xscale("log")
    if not spent and pos:
        ticks = sorted(set(pos))
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{x:g}" for x in ticks])
        ax.minorticks_off()
    ax.set_xlabel("overhead spent per episode (s)" if spent else "budget B (s)", fontsize=8)
    ax.set_ylabel("amortised utility (%)", fontsize=8)
    ax.set_ylim(bottom=0)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.25, lw=0.5)
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        ax.set_title(_wrap(title), fontsize=8)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- policies
def policy_rates(points: pl.DataFrame, best: pl.DataFrame, title: str = ""):
    """Utility against the adaptation rate, one panel per scenario (offline, then each
    protocol strict → relaxed), one line per method through its variants in rate order
    (docs/design/design.md §11); the method's best variant in the panel is ringed."""
    scen = points.select("scenario", "scenario_order").unique().sort("scenario_order").get_column("scenario").to_list()
    cols = min(len(scen), 4)
    rows = math.ceil(len(scen) / cols)
    fig, axes = _subplots(rows, cols, figsize=(2.3 * cols + 1.4, 2.1 * rows + 0.5), squeeze=False)
    bases = list(dict.fromkeys(best.get_column("method").to_list()))
    ringed = {(r["method"], r["scenario"]): r["best_method"] for r in best.iter_rows(named=True)}
    for k, sc in enumerate(scen):
        ax = axes[k // cols][k % cols]
        part = points.filter(pl.col("scenario") == sc)
        for b in bases:
            sub = part.filter((pl.col("base") == b) & pl.col("rate").is_not_null()).sort("rate")
            if not sub.height:
                continue
            xs = [x * 100 for x in sub.get_column("rate").to_list()]
            ys = [y * 100 for y in sub.get_column("utility").to_list()]
            col = method_colour(b)
            ax.plot(xs, ys, color=col, lw=1.1, marker="o", ms=2.5, label=b if k == 0 else None)
            top = ringed.get((b, sc))
            for m, x, y in zip(sub.get_column("method").to_list(), xs, ys):
                if m == top:
                    ax.plot([x], [y], marker="o", ms=7, mfc="none", mec=col, mew=1.2)
                if split_label(m)[1] is None:
                    ax.plot([x], [y], marker="s", ms=3.5, color=col)
        ax.set_title(sc, fontsize=7)
        ax.set_xlim(0, 105)
        ax.tick_params(labelsize=6)
        ax.grid(alpha=0.25, lw=0.5)
        if k % cols == 0:
            ax.set_ylabel("U (%)", fontsize=7)
        if k // cols == rows - 1:
            ax.set_xlabel("adaptation rate (%)", fontsize=7)
    for k in range(len(scen), rows * cols):
        axes[k // cols][k % cols].set_visible(False)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, fontsize=6, frameon=False, loc="upper right")
    if title:
        fig.suptitle(_wrap(title, 100), fontsize=7)
    fig.tight_layout(rect=(0, 0, 0.88, 1))
    return fig


# ----------------------------------------------------------------------------- one group
def group_figures(inp, group, computed, fig_dir, prefix, all_episodes, episodes) -> dict[str, tuple[Path, Path]]:
    """The figures of one group, by name (PNG and PDF paths), from the tables already computed.
    Names from the data are drawn as they are: ``$`` never starts mathtext (a method named
    ``a$\\frac$`` would otherwise fail to draw)."""
    with rc_context({"text.parse_math": False}):
        return _group_figures(inp, group, computed, fig_dir, prefix, all_episodes, episodes)


def _group_figures(inp, group, computed, fig_dir, prefix, all_episodes, episodes) -> dict[str, tuple[Path, Path]]:
    u = filter_group(inp.pooled, group)
    label = group_label(group)
    made: dict[str, tuple[Path, Path]] = {}
    w, wc = computed["winners"], computed["win_counts"]
    if w is not None and filter_group(w, group).height:
        made["winners"] = tuple(save(winners_grid(filter_group(w, group), filter_group(wc, group), label), fig_dir, prefix + "winners"))
    eps_all = an.episode_order(u.get_column("episode").unique().to_list())
    if episodes:
        missing = [e for e in episodes if e not in eps_all]
        if missing:
            raise ReportError(f"episode(s) {', '.join(missing)} not in the results; episodes: {', '.join(eps_all)}")
        chosen = list(episodes)
    else:
        chosen = eps_all if all_episodes else an.representative_episodes(eps_all)
    if chosen and u.filter(pl.col("protocol") != P.reference()).height:
        made["curves"] = tuple(save(utility_curves(u, chosen, an.method_order(u), label), fig_dir, prefix + "curves"))
    lat = computed["latency"]
    if lat is not None and filter_group(lat, group).height:
        made["latency"] = tuple(save(latency_bars(filter_group(lat, group), label), fig_dir, prefix + "latency"))
    par = computed["pareto"]
    if par is not None and filter_group(par, group).height:
        made["pareto"] = tuple(save(pareto_plot(filter_group(par, group), label), fig_dir, prefix + "pareto"))
    pol = computed["policies"]
    if pol is not None and filter_group(pol, group).height:
        points = filter_group(an.policy_points(inp.pooled, inp.trace_rows), group)
        made["policy_rates"] = tuple(save(policy_rates(points, filter_group(pol, group), label), fig_dir, prefix + "policy-rates"))
    return made
