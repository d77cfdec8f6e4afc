"""The report's comparison across devices: the same study traced on several machines.

Traces from many machines land in one ``traces/`` tree; each (dataset, model, device, …) group
is analysed on its own. When the same setting (dataset, model, batch size, stream) was traced
on more than one device, this section puts the winners side by side, cell by cell, as the
paper's CPU-vs-GPU appendix does: a method that wins on a GPU can lose on a CPU because its
overhead relative to λ is different there.
"""

from __future__ import annotations

import polars as pl

from tempora_sim import analyses as an
from tempora_sim import protocols as P
from tempora_sim.reporting.scenarios import best_per_cell

SETTING = ("dataset", "model", "batch_size", "stream")


def device_winners(utility: pl.DataFrame) -> dict[tuple, pl.DataFrame]:
    """Per setting traced on ≥ 2 devices: one row per (protocol, value), a winner column per device
    (the best utility pooled over episodes and seeds)."""
    if utility.height == 0 or "device" not in utility.columns:
        return {}
    rows = an.pool_seeds(utility.filter(pl.col("episode") == an.POOLED))
    out = {}
    for key, part in rows.group_by(list(SETTING), maintain_order=True):
        devices = part["device"].unique(maintain_order=True).to_list()
        if len(devices) < 2:
            continue
        best = best_per_cell(part, ["device", "protocol", "value"])
        table = best.pivot(on="device", index=["protocol", "value"], values="winner")
        order = {p: i for i, p in enumerate(P.single())}
        table = (
            table.with_columns(pl.col("protocol").replace_strict(order, default=99).alias("_o"))
            .sort("_o", "value", nulls_last=True)
            .drop("_o")
        )
        out[key] = table.with_columns((pl.concat_list([pl.col(d) for d in devices]).list.n_unique() > 1).alias("differs"))
    return out


def markdown(utility: pl.DataFrame) -> list[str]:
    """The section (empty when no setting was traced on more than one device)."""
    tables = device_winners(utility)
    if not tables:
        return []
    md = [
        "## Across devices",
        "",
        "The same setting traced on several devices: the winner of every scenario cell on each "
        "(pooled over episodes). Cells where the devices disagree are marked ←.",
        "",
    ]
    for key, t in tables.items():
        devices = [c for c in t.columns if c not in ("protocol", "value", "differs")]
        md += [
            f"**{' · '.join(str(k) for k in key)}**: the winner differs in {t['differs'].sum()} of {t.height} cells.",
            "",
            "| scenario | " + " | ".join(devices) + " |",
            "|---" * (len(devices) + 1) + "|",
        ]
        for r in t.iter_rows(named=True):
            cell = r["protocol"] if r["protocol"] == P.reference() else f"{r['protocol']} {an.format_value(r['protocol'], r['value'])}"
            mark = " ←" if r["differs"] else ""
            md.append(f"| {cell} | " + " | ".join(str(r[d]) for d in devices) + f"{mark} |")
        md.append("")
    return md
