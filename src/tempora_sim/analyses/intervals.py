"""How uncertain each utility is: bootstrap intervals of every seed-pooled utility (per-episode
cells and pooled rows), and those intervals joined onto the tables."""

from __future__ import annotations

import numpy as np
import polars as pl

from tempora_sim.analyses.cells_and_orders import check_utility_table
from tempora_sim.analyses.latency import align_group_dtypes
from tempora_sim.sweeps.utility_table import POOLED, SEED, group_columns, pool_seeds
from tempora_sim.uncertainty import bootstrap as st


def utility_intervals(
    df: pl.DataFrame,
    rows: pl.DataFrame | None = None,
    opts: st.BootstrapOptions | None = None,
    pooled: bool = True,
    timing=None,
) -> st.Intervals:
    """Bootstrap distributions and percentile intervals of every seed-pooled utility.

    ``df`` is the sweep's per-seed table. Per-episode cells resample the episode's batches
    (the seeds' batches concatenated) and need ``rows``, the traces' adapt rows with
    ``correct``, ``n``, ``e_ms``, ``l_ms`` (:func:`~tempora_sim.analyses.latency.trace_rows`); without them only the pooled
    rows get intervals. Pooled rows resample the (seed, episode) units, weighted by their
    batches. Methods of one cell share resamples, so their differences are paired.
    ``pooled=False`` leaves the pooled rows out (only the per-episode cells).

    ``timing`` (:class:`tempora_sim.uncertainty.timing_replicates.TimingReplicates` of the same sweep) adds the
    traces' measured timing variability to every draw (:func:`tempora_sim.uncertainty.bootstrap.with_timing`)."""
    check_utility_table(df)
    opts = opts or st.BootstrapOptions()
    g = group_columns(df)
    per_ep = df.filter((pl.col("episode") != POOLED) & pl.col("utility").is_not_null())
    if per_ep.schema["value"] == pl.Null:
        per_ep = per_ep.with_columns(pl.col("value").cast(pl.Float64))
    parts = []
    need = ("correct", "n", "e_ms", "l_ms", "episode", "step", "method")
    timed = timing is not None and timing.count > 0  # the bounds are those of the draws with timing added
    if rows is not None and per_ep.height and all(c in rows.columns for c in need):
        parts.append(_cell_intervals(per_ep, rows, g, opts, bounds=not timed))
    if per_ep.height and pooled:
        parts.append(_pooled_intervals(per_ep, g, opts, bounds=not timed))
    out = st.concat(parts)
    if timing is not None and timing.count and out.index.height:
        keys = [c for c in g if c in out.index.columns] + ["method", "episode", "protocol", "value"]
        out = st.with_timing(out, timing.shifts(out.index, keys, "utility", pool=pool_seeds))
    return out


def _cell_intervals(per_ep: pl.DataFrame, rows: pl.DataFrame, g: list[str], opts, bounds: bool = True) -> st.Intervals:
    has_seed = SEED in per_ep.columns and SEED in rows.columns
    sk = [c for c in g if c in rows.columns] + ([SEED] if has_seed else [])
    if "phase" in rows.columns:
        rows = rows.filter(pl.col("phase") == "adapt")
    rows = align_group_dtypes(rows, per_ep)
    by_trace = rows.sort(sk + ["method", "episode", "step"]).partition_by(sk + ["method", "episode"], as_dict=True)
    names = g + ["method", "episode", "protocol", "value"]
    # each trace episode's utility rows scored as one matrix; a cell (one key of ``names``) is
    # the concatenation, in seed order, of its rows of those matrices
    matrices: list[np.ndarray] = []
    pieces: dict[tuple, list[tuple[object, int, int]]] = {}
    for key, urows in per_ep.partition_by(sk + ["method", "episode"], as_dict=True).items():
        trows = by_trace.get(key)
        if trows is None:
            continue
        seed = urows.get_column(SEED)[0] if has_seed else 0
        p = len(matrices)
        matrices.append(st.batch_score_matrix(trows, urows))
        for i, k in enumerate(urows.select(names).iter_rows()):
            pieces.setdefault(k, []).append((seed, p, i))
    # cells made of the same matrices (in the same order) are gathered together, one slice per matrix
    by_source: dict[tuple, list[int]] = {}
    picks: list[tuple[int, ...]] = []
    for c, v in enumerate(pieces.values()):
        v = sorted(v, key=lambda x: x[0])
        by_source.setdefault(tuple(p for _, p, _ in v), []).append(c)
        picks.append(tuple(i for _, _, i in v))
    lengths: dict[int, list[tuple[list[int], np.ndarray]]] = {}
    for source, cells in by_source.items():
        at = np.asarray([picks[c] for c in cells], np.int64).reshape(len(cells), len(source))
        parts = [matrices[p][at[:, q]] for q, p in enumerate(source)]
        values = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        lengths.setdefault(values.shape[1], []).append((cells, values))
    # stacked by length in the order cells first show each length (the resamples' pairing)
    first: dict[int, int] = {}
    for n, blocks in lengths.items():
        first[n] = min(min(cells) for cells, _ in blocks)
    groups = []
    for n in sorted(lengths, key=first.__getitem__):
        members = sorted(c for cells, _ in lengths[n] for c in cells)
        values = np.empty((len(members), n))
        where = {c: i for i, c in enumerate(members)}
        for cells, block in lengths[n]:
            values[[where[c] for c in cells]] = block
        groups.append((members, values))
    return st.episode_intervals_grouped([dict(zip(names, k)) for k in pieces], groups, opts, bounds)


def _pooled_intervals(per_ep: pl.DataFrame, g: list[str], opts, bounds: bool = True) -> st.Intervals:
    unit_cols = ([SEED] if SEED in per_ep.columns else []) + ["episode"]
    weight = pl.col("num_batches").cast(pl.Float64) if "num_batches" in per_ep.columns else pl.lit(1.0)
    grouped = (
        per_ep.with_columns(weight.alias("_w"))
        .sort(unit_cols)
        .group_by(g + ["method", "protocol", "value"], maintain_order=True)
        .agg(pl.col("utility"), pl.col("_w"), pl.concat_str([pl.col(c).cast(pl.String) for c in unit_cols], separator="/").alias("_unit"))
    )
    keys = grouped.select(*g, "method", pl.lit(POOLED).alias("episode"), "protocol", "value").to_dicts()
    # rows over the same units (in the same order) are resampled together: one matrix each
    by_ids: dict[tuple, list[int]] = {}
    for i, ids in enumerate(grouped.get_column("_unit").to_list()):
        by_ids.setdefault(tuple(ids), []).append(i)
    groups = []
    for ids, members in by_ids.items():
        at = pl.Series(members, dtype=pl.UInt32)
        values, weights = (grouped.get_column(c).gather(at).list.to_array(len(ids)).to_numpy() for c in ("utility", "_w"))
        groups.append((members, values, weights))
    return st.unit_intervals_grouped(keys, groups, opts, bounds)


def attach_intervals(t: pl.DataFrame, intervals: st.Intervals | None, episode: str | None = None) -> pl.DataFrame:
    """Join ``lo``/``hi`` (the utility's interval) onto a table with group columns, ``method``,
    ``protocol``, ``value`` and ``episode`` (or the given ``episode`` for pooled tables)."""
    if intervals is None or not intervals.index.height:
        return t.with_columns(pl.lit(None, pl.Float64).alias("lo"), pl.lit(None, pl.Float64).alias("hi"))
    idx = intervals.index
    t2 = t if "episode" in t.columns else t.with_columns(pl.lit(episode).alias("episode"))
    keys = [c for c in group_columns(t2) if c in idx.columns] + ["method", "episode", "protocol", "value"]
    look = idx.select(keys + ["lo", "hi"]).with_columns(pl.col("value").cast(pl.Float64))
    t2 = t2.with_columns(pl.col("value").cast(pl.Float64))
    out = t2.join(look, on=keys, how="left", nulls_equal=True)
    return out if "episode" in t.columns else out.drop("episode")
