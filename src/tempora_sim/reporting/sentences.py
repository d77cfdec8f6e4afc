"""The report's summary: plain-language findings for one comparison group, each sentence
generated from the registry's tables, so it never says more than the numbers show."""

from __future__ import annotations

import polars as pl

from tempora_sim import analyses as an
from tempora_sim import protocols as P
from tempora_sim.reporting.groups import filter_group
from tempora_sim.reporting.inputs import ReportInputs
from tempora_sim.reporting.markdown import FORMATS, md_name, pct
from tempora_sim.reporting.registry import TABLES, compute_table


def _row(t: pl.DataFrame | None, **eq) -> dict | None:
    if t is None:
        return None
    for k, v in eq.items():
        t = t.filter(pl.col(k) == v)
    return t.row(0, named=True) if t.height else None


def _pc(x: float | None, d: int = 1) -> str:
    return pct(x, d) + "%" if x is not None else "–"


def _count_phrase(names: list[str]) -> str:
    """``a, b and c``; callers pass names already through :func:`md_name`."""
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
    temporal = w.filter(pl.col("protocol") != P.reference())
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
    off = w.filter(pl.col("protocol") == P.reference()).explode("winners")
    fav = None
    if off.height:
        oc = off.group_by("winners").len().sort(["len", "winners"], descending=[True, False])
        fav, fav_n = oc.row(0)
        lines.append(f"**Offline**, {md_name(fav)} is best in {fav_n}/{n_ep} episodes.")
    if temporal.height:
        lines.append(_pressure_sentence(w, temporal, fav))
    lines += _strict_sentences(inp, group, w, n_ep, fav)
    rs = g("rank_correlation_summary")
    if rs is not None and rs.height:
        parts = []
        for proto in P.temporal():
            sub = rs.filter(pl.col("protocol") == proto).sort("scenario_order")
            if sub.height >= 1 and sub.get_column("mean").drop_nulls().len():
                a, b = sub.row(0, named=True), sub.row(-1, named=True)
                txt = f"{FORMATS['r'](a['mean'])} at {md_name(a['scenario'])}"
                if sub.height > 1:
                    txt += f" → {FORMATS['r'](b['mean'])} at {md_name(b['scenario'])}"
                parts.append(txt)
        if parts:
            lines.append(
                "**Offline rankings as a predictor**: mean Spearman r_s from the strictest to the most relaxed "
                "value of each protocol: " + "; ".join(parts) + " (1 = offline order holds, −1 = reversed)."
            )
    bs = g("below_standard")
    if bs is not None and bs.height:
        worst = bs.sort(["below", "method"], descending=[True, False]).row(0, named=True)
        never = [md_name(m) for m in bs.filter(pl.col("below") == 0).get_column("method").to_list()]
        if worst["below"] > 0:
            shares = {p: worst.get(f"{p}_share") or 0 for p in P.temporal()}
            where = max(shares, key=shares.get)
            sent = (
                f"**Worse than not adapting**: {md_name(worst['method'])} falls below standard inference in "
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
        lines.append(root_cause_sentence(lat))
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
    reference = P.reference()
    off = w.filter(pl.col("protocol") == reference).select(g + ["episode", pl.col("winner").alias("_off")])
    t = w.filter(pl.col("protocol") != reference).join(off, on=g + ["episode"], how="left")
    return t.filter(pl.col("_off").is_not_null() & (pl.col("winner") != pl.col("_off")))


def _pressure_sentence(w: pl.DataFrame, temporal: pl.DataFrame, fav: str | None) -> str:
    """Whether time pressure changes the winners, said only as far as the cells show it.

    A change is a temporal cell whose winner differs from its episode's offline winner; a
    change is *certain* when the temporal winner's lead is certain (docs/design/statistics.md)."""
    changed = _changed_cells(w)
    n_t = temporal.height
    tc = temporal.explode("winners").group_by("winners").len().sort(["len", "winners"], descending=[True, False])
    top = [f"{md_name(m)} {n}" for m, n in tc.head(3).iter_rows()]
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
        sent += f" The offline favourite {md_name(fav)} wins {fav_t or 'none'} of the {n_t} temporal cells."
    return sent


def root_cause_sentence(lat: pl.DataFrame) -> str:
    """The slowest method's latency split; an overhead is only stated where it is positive
    (ē − λ < 0 means λ's provision covers the prediction: no intrinsic overhead)."""
    slow = lat.sort("slowdown", descending=True).row(0, named=True)
    if slow["slowdown"] is None or slow["slowdown"] <= 1.0:
        return (
            f"**Root cause**: no method takes longer than λ per batch on average (the slowest, "
            f"{md_name(slow['method'])}, takes δ̄/λ = {slow['slowdown']:.2f}×), so time pressure costs little here."
        )
    parts = []
    if slow["l_mean"] is not None and slow["l_mean"] > 0.05:
        parts.append(f"{slow['l_mean']:.1f} ms of its {slow['delta_mean']:.1f} ms comes after the prediction (extrinsic ℓ̄)")
    if slow["e_minus_lambda"] is not None and slow["e_minus_lambda"] > 0.05:
        parts.append(f"{slow['e_minus_lambda']:.1f} ms before it (intrinsic ē − λ)")
    else:
        parts.append("its prediction itself arrives within λ (no intrinsic overhead)")
    return (
        f"**Root cause**: the slowest method, {md_name(slow['method'])}, takes δ̄/λ = {slow['slowdown']:.2f}× standard "
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
    budget = an.budget_protocol()
    fmt = lambda b: an.format_value(budget, b).removeprefix("B=")  # noqa: E731
    parts = [f"{md_name(m)} at B = {fmt(lo)}" if lo == hi else f"{md_name(m)} for B = {fmt(lo)}–{fmt(hi)}" for m, lo, hi in runs]
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
    # one sentence per protocol with a decomposition table; the sentence itself is written for
    # each protocol's terms below
    decomposed = [p for p in P.temporal() if f"{p}_decomposition" in TABLES]
    tables = {p: compute_table(f"{p}_decomposition", inp) for p in decomposed}
    for proto in decomposed:
        cw, t = _cell_wins(w, proto), tables[proto]
        if cw is None or t is None:
            continue
        t = filter_group(t, group)
        scen, _, counts = cw
        lead, k = counts[0]
        r = _row(t, method=lead)
        if r is None:
            continue
        head = f"**Strictest {proto} pressure ({md_name(scen)})**: {md_name(lead)} wins {k}/{n_ep} episodes"
        cell = w.filter((pl.col("scenario") == scen) & pl.col("winners").list.contains(lead))
        if cell.get_column("certain").is_not_null().any():
            head += f" ({int(cell.get_column('certain').fill_null(False).sum())} of them certain)"
        other = fav if fav and fav != lead else None
        o = _row(t, method=other) if other else None
        s = f"{head}: " + P.get(proto).strict_sentence(r, (other, o) if o else None, _pc, md_name)
        if "below_standard" in t.columns:
            s += _below_standard_clause(t)
        out.append(s)
    return out


def _below_standard_clause(t: pl.DataFrame) -> str:
    """Which methods of a decomposition that marks harmful adaptation (``below_standard``) end
    below standard inference: those whose budget ran out with a frozen model worse than the
    baseline (:func:`below_frozen_sentence`), then the rest."""
    below = t.filter(pl.col("below_standard").fill_null(False))
    base = _row(t, method=an.BASELINE)
    frozen_worse = below.filter((pl.col("beta") < 1) & (pl.col("acc_frozen") < base["utility"])) if base else below.clear()
    s = below_frozen_sentence(frozen_worse)
    rest = below.filter(~pl.col("method").is_in(frozen_worse.get_column("method").to_list()))
    if rest.height:
        names = [md_name(m) for m in rest.get_column("method").to_list()]
        too = " too" if frozen_worse.height else ""
        s += f" {_count_phrase(names)} {'is' if len(names) == 1 else 'are'} below standard inference{too}."
    return s


def below_frozen_sentence(frozen_worse: pl.DataFrame) -> str:
    """What the methods below standard inference whose budget ran out (``beta`` < 1, their
    frozen accuracy below the baseline's utility) did: adapted and were harmed, or never
    adapted at all (``beta`` = 0: the budget ran out before their first batch, so the model
    they serve is the source model under their own normalisation-statistics rule)."""
    s = ""
    unadapted = frozen_worse.filter(pl.col("beta") <= 0)
    adapted = frozen_worse.filter(pl.col("beta") > 0)
    if adapted.height:
        names = [md_name(m) for m in adapted.get_column("method").to_list()]
        s += (
            f" {_count_phrase(names)} end{'s' if len(names) == 1 else ''} below standard inference: the budget "
            f"runs out after {_pc(adapted.get_column('beta').max())} of the stream or less and the frozen "
            "model is worse than the source model (harmful adaptation)."
        )
    if unadapted.height:
        names = [md_name(m) for m in unadapted.get_column("method").to_list()]
        one = len(names) == 1
        s += (
            f" {_count_phrase(names)} adapt{'s' if one else ''} on no batch within the budget and end{'s' if one else ''} "
            "below standard inference without having adapted: the model served is the source model under "
            f"{'its' if one else 'their'} own normalisation-statistics rule, not one harmed by updates."
        )
    return s
