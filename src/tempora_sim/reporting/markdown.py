"""How report cells look: number formats, the ``Column`` a table shows, the wide (pivoted)
layouts of some tables, and Markdown and CSV rendering.

One formatting rule per kind of number, used by report.md, ``tempora-sim show`` and the CSVs,
so a utility reads the same everywhere.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

import polars as pl

from tempora_sim import analyses as an

#: Characters a name from the data may not carry into report.md as they are: HTML (a domain
#: folder named ``<svg onload=…>`` would run when the report is rendered), links and images
#: (``[…](…)``, ``![…](…)``), code spans and emphasis. Each is written so that it renders as
#: itself in every Markdown renderer (entities for HTML, backslash escapes for the rest).
_MD_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\\": "\\\\", "`": "\\`", "*": "\\*", "[": "\\[", "]": "\\]", "\n": " ", "\r": " "}
_MD_SPECIAL = re.compile("[" + re.escape("".join(_MD_ESCAPES)) + "]")


def md_name(value) -> str:
    """A name that comes from the data (a method, domain, dataset, model, device, episode,
    group label) as Markdown text that shows it literally and runs nothing."""
    return _MD_SPECIAL.sub(lambda m: _MD_ESCAPES[m.group()], str(value))


def md_code(value) -> str:
    """``value`` as one Markdown code span, whatever backticks it holds (HTML in a code span is
    never interpreted)."""
    text = str(value).replace("\n", " ").replace("\r", " ")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_frame(t: pl.DataFrame) -> pl.DataFrame:
    """Every text value of ``t`` (and of its lists of text) through :func:`md_name`."""
    exprs = []
    old, new = list(_MD_ESCAPES), list(_MD_ESCAPES.values())
    for name, dtype in t.schema.items():
        if dtype == pl.Utf8:
            exprs.append(pl.col(name).str.replace_many(old, new))
        elif isinstance(dtype, pl.List) and dtype.inner == pl.Utf8:
            exprs.append(pl.col(name).list.eval(pl.element().str.replace_many(old, new)))
    return t.with_columns(exprs) if exprs else t


def pct(x, digits=1):
    """A fraction as a percentage without the sign: ``0.4567`` → ``45.7``; – for missing, ∞."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return f"{x * 100:.{digits}f}"


FORMATS: dict[str, Callable[[object], str]] = {
    "pct": lambda x: pct(x, 1),
    "pct2": lambda x: pct(x, 2),
    "pp": lambda x: pct(x, 2),
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
    """One shown column of a table: the frame's column, its header and its format (a key of
    :data:`FORMATS`, or ``ci``/``rci`` for an interval)."""

    name: str
    header: str
    fmt: str = "str"


# ----------------------------------------------------------------------------- pivots
def _scenarios(t: pl.DataFrame) -> list[str]:
    return t.select("scenario", "scenario_order").unique().sort("scenario_order").get_column("scenario").to_list()


def winners_pivot(t: pl.DataFrame):
    scen = _scenarios(t)
    look = {
        (r["episode"], r["scenario"]): r["winner"] + ("?" if r.get("certain") is False and r["n_winners"] == 1 else "")
        for r in t.iter_rows(named=True)
    }
    rows = [[ep] + [look.get((ep, s), "–") for s in scen] for ep in an.episode_order(t.get_column("episode").unique().to_list())]
    return ["episode"] + scen, rows


def spearman_pivot(t: pl.DataFrame):
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


def sweep_pivot(t: pl.DataFrame):
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


def policies_pivot(t: pl.DataFrame):
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
                row.append(f"every batch {pct(r['utility'], 1)}")
            else:
                gain = "" if r["gain"] is None else f" ({r['gain'] * 100:+.1f} pp{'?' if r['certain'] is False else ''})"
                row.append(f"{r['best']} {pct(r['utility'], 1)}{gain}")
        rows.append(row)
    return ["method"] + scen, rows


def offline_pivot(t: pl.DataFrame):
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
                else (f"**{pct(r['utility'], 2)}**" if r["rank"] == 1 else f"{pct(r['utility'], 2)} ({r['rank']})") + _pm(r)
            )
        rows.append(row)
    return ["episode"] + methods, rows


def formatted_rows(spec, t: pl.DataFrame) -> tuple[list[str], list[list[str]]]:
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
