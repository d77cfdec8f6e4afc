"""What adapting on fewer batches buys: the best sparse-adaptation policy of each method in each
pooled scenario, its gain over adapting on every batch, and what ``advise`` says about it
(docs/design/design.md §11)."""

from __future__ import annotations

import polars as pl

from tempora_schema.policies import parse_policy, split_label
from tempora_sim.analyses.cells_and_orders import DEFAULT_TOL, AnalysisError, check_utility_table, method_order, with_scenario
from tempora_sim.sweeps.utility_table import GROUP_COLUMNS, POOLED, group_columns, pool_seeds
from tempora_sim.uncertainty import bootstrap as st

#: ``best`` of a policy row whose best variant is the method without a policy
EVERY_BATCH = "every batch"


def _nominal_rate(label: str) -> float | None:
    policy = split_label(label)[1]
    if policy is None:
        return 1.0
    try:
        parsed = parse_policy(policy)
    except Exception:  # a label the simulator did not write: no rate
        return None
    return 1.0 if parsed is None else parsed.nominal_rate


def adaptation_rates(trace_rows: pl.DataFrame | None) -> dict[tuple, float]:
    """Share of adapt rows on which the model changed (``updated``), per (group values...,
    method); without trace rows, the policy's nominal rate (1/K, P; 1 without a policy)."""
    out: dict[tuple, float] = {}
    if trace_rows is not None and trace_rows.height:
        g = [c for c in GROUP_COLUMNS if c in trace_rows.columns]
        rates = trace_rows.filter(pl.col("phase") == "adapt").group_by(g + ["method"]).agg(pl.col("updated").cast(pl.Float64).mean())
        for row in rates.iter_rows(named=True):
            out[tuple(str(row[c]) for c in g) + (row["method"],)] = float(row["updated"])
    return out


def policy_gains(
    df: pl.DataFrame, intervals: st.Intervals | None = None, trace_rows: pl.DataFrame | None = None, tol: float = DEFAULT_TOL
) -> pl.DataFrame:
    """The best sparse-adaptation policy of each method in each pooled scenario
    (docs/design/design.md §11): per (group, method with at least one policy trace, scenario), the
    variant with the highest pooled utility among the method without a policy and its policy
    traces (``best``: the policy, or ``every batch``; ties go to adapting on every batch, then
    to the lower adaptation rate), its utility and interval, the utility of adapting on every
    batch, and ``gain`` = best − every batch with the paired bootstrap interval of the
    difference; ``certain`` when that interval lies above 0 (null when there is no interval,
    false when every batch is best). ``rate`` is the best variant's adaptation rate: the share
    of batches it changed the model on (from the traces; the nominal 1/K or P without them)."""
    check_utility_table(df)
    p = with_scenario(pool_seeds(df).filter((pl.col("episode") == POOLED) & pl.col("utility").is_not_null()))
    if not p.height:
        raise AnalysisError("no pooled results")
    g = group_columns(p)
    p = p.with_columns(pl.col("method").map_elements(lambda m: split_label(m)[0], return_dtype=pl.String).alias("_base"))
    with_policy = p.filter(pl.col("method") != pl.col("_base")).select(g + ["_base"]).unique()
    if not with_policy.height:
        raise AnalysisError("no trace under a sparse-adaptation policy (tempora-trace run --policy …)")
    p = p.join(with_policy, on=g + ["_base"], how="inner", nulls_equal=True)
    rates = adaptation_rates(trace_rows)
    look = None
    if intervals is not None and intervals.index.height:
        idx = intervals.index
        ik = [c for c in g if c in idx.columns] + ["method", "episode", "protocol", "value"]
        look = {
            tuple(r[:-3]): (r[-3], r[-2], r[-1])
            for r in idx.select(ik + ["row", "lo", "hi"]).with_columns(pl.col("value").cast(pl.Float64)).iter_rows()
        }
        ik_cols = ik
    out_rows = []
    for _, part in p.group_by(g + ["_base", "scenario"], maintain_order=True):
        rows = part.to_dicts()
        base = rows[0]["_base"]
        gvals = tuple(str(rows[0][c]) for c in g)

        def rate_of(m: str, gvals: tuple = gvals) -> float | None:
            return rates.get(gvals + (m,), _nominal_rate(m))

        plain = next((r for r in rows if r["method"] == base), None)
        top = max(r["utility"] for r in rows)
        tied = [r for r in rows if r["utility"] >= top - tol]
        best = min(
            tied, key=lambda r: (r["method"] != base, rate_of(r["method"]) if rate_of(r["method"]) is not None else 2.0, r["method"])
        )

        def row_of(r):
            if look is None:
                return None
            key = tuple(r[c] if c not in ("value",) else (None if r["value"] is None else float(r["value"])) for c in ik_cols)
            return look.get(key)

        b_iv = row_of(best)
        gain_lo = gain_hi = certain = None
        if plain is not None and b_iv is not None:
            p_iv = row_of(plain)
            if best is plain:
                gain_lo = gain_hi = 0.0
                certain = False
            elif p_iv is not None:
                lo, hi = intervals.difference([b_iv[0]], [p_iv[0]])
                gain_lo, gain_hi = float(lo[0]), float(hi[0])
                certain = gain_lo > 0
        out_rows.append(
            {
                **{c: rows[0][c] for c in g},
                "method": base,
                "protocol": rows[0]["protocol"],
                "param": rows[0]["param"],
                "value": rows[0]["value"],
                "scenario": rows[0]["scenario"],
                "scenario_order": rows[0]["scenario_order"],
                "best": EVERY_BATCH if best["method"] == base else split_label(best["method"])[1],
                "best_method": best["method"],
                "utility": best["utility"],
                "lo": None if b_iv is None else b_iv[1],
                "hi": None if b_iv is None else b_iv[2],
                "every_batch": None if plain is None else plain["utility"],
                "gain": None if plain is None else best["utility"] - plain["utility"],
                "gain_lo": gain_lo,
                "gain_hi": gain_hi,
                "certain": certain,
                "rate": rate_of(best["method"]),
                "variants": len(rows),
            }
        )
    schema = {c: p.schema[c] for c in g}
    schema.update(
        method=pl.String, protocol=pl.String, param=pl.String, value=pl.Float64, scenario=pl.String, scenario_order=pl.Int64,
        best=pl.String, best_method=pl.String, utility=pl.Float64, lo=pl.Float64, hi=pl.Float64, every_batch=pl.Float64,
        gain=pl.Float64, gain_lo=pl.Float64, gain_hi=pl.Float64, certain=pl.Boolean, rate=pl.Float64, variants=pl.Int64,
    )  # fmt: skip
    out = pl.DataFrame(out_rows, schema=schema)
    order = {m: i for i, m in enumerate(method_order(df))}
    return (
        out.with_columns(pl.col("method").replace_strict(order, default=len(order), return_dtype=pl.Int64).alias("_o"))
        .sort(g + ["_o", "scenario_order"])
        .drop("_o")
    )


def policy_points(pooled: pl.DataFrame, trace_rows: pl.DataFrame | None = None) -> pl.DataFrame:
    """Pooled utility of every variant of the methods with policy traces, with its adaptation
    rate (as :func:`policy_gains`), per scenario: the points of the utility-against-rate figure."""
    p = with_scenario(pool_seeds(pooled).filter((pl.col("episode") == POOLED) & pl.col("utility").is_not_null()))
    g = group_columns(p)
    p = p.with_columns(pl.col("method").map_elements(lambda m: split_label(m)[0], return_dtype=pl.String).alias("base"))
    bases = set(p.filter(pl.col("method") != pl.col("base")).get_column("base").to_list())
    p = p.filter(pl.col("base").is_in(sorted(bases)))
    rates = adaptation_rates(trace_rows)
    r = [rates.get(tuple(str(row[c]) for c in g) + (row["method"],), _nominal_rate(row["method"])) for row in p.iter_rows(named=True)]
    return p.with_columns(pl.Series("rate", r, pl.Float64))


def policy_advice(frame: pl.DataFrame, intervals: st.Intervals | None, recommended: str) -> dict:
    """What ``advise`` says about the recommended method's policy (one scenario's sweep rows):
    the method and policy it stands for, the policy in words and, when the method was traced
    under policies, the gain of the recommended variant over adapting on every batch with its
    paired interval and certainty (``vs_every_batch``; None otherwise)."""
    base, policy = split_label(recommended)
    parsed = None if policy is None else parse_policy(policy)
    words = "adapting on every batch" if parsed is None else parsed.describe()
    out = {"method": base, "policy": policy, "policy_words": words, "vs_every_batch": None}
    try:
        gains = policy_gains(frame, intervals)
    except AnalysisError:
        return out
    mine = gains.filter(pl.col("method") == base)
    if not mine.height or mine.row(0, named=True)["every_batch"] is None:
        return out
    r = mine.row(0, named=True)
    vs = {"every_batch_utility": r["every_batch"], "gain": r["gain"], "gain_ci": [r["gain_lo"], r["gain_hi"]], "certain": r["certain"]}
    if r["best_method"] != recommended:
        # the recommendation and the method's best variant differ only by a tie broken the other way
        rec = pool_seeds(frame).filter((pl.col("episode") == POOLED) & (pl.col("method") == recommended)).get_column("utility")
        vs = {**vs, "gain": float(rec.mean()) - r["every_batch"], "gain_ci": [None, None], "certain": None}
    return {**out, "vs_every_batch": {**vs, "variants": r["variants"]}}
