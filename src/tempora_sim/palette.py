"""Each method's colour, the same in every figure of the report and on the interactive page:
a fixed palette keyed by the method's name, with a stable hash-based fallback for unknown names,
so a reader who learns "ETA is red" in the winners grid can find ETA in every other plot."""

from __future__ import annotations

import zlib

PALETTE = {
    "standard": "#4d4d4d",
    "source": "#4d4d4d",
    "adabn": "#1f77b4",
    "bn": "#1f77b4",
    "lame": "#17becf",
    "neo": "#2ca02c",
    "tent": "#ff7f0e",
    "eta": "#d62728",
    "eata": "#ad494a",
    "shotim": "#9467bd",
    "shot": "#9467bd",
    "deyo": "#8c564b",
    "cmf": "#e377c2",
    "sar": "#bcbd22",
    "etanoreset": "#ff9896",
    "shotnorm": "#c5b0d5",  # the paper's ETA* / SHOT-IM* ablation variants
    "spa": "#393b79",
    "zerosiam": "#637939",
    "memo": "#843c39",
    "cotta": "#7b4173",
    "rotta": "#e7969c",
}
FALLBACK = [
    "#3182bd",
    "#e6550d",
    "#31a354",
    "#756bb1",
    "#636363",
    "#6baed6",
    "#fd8d3c",
    "#74c476",
    "#9e9ac8",
    "#969696",
    "#a55194",
    "#de9ed6",
    "#8ca252",
    "#bd9e39",
    "#e7ba52",
]


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def method_colour(method: str) -> str:
    """The method's colour: fixed for known methods, stable (crc32) for others."""
    key = _norm(method)
    if key in PALETTE:
        return PALETTE[key]
    return FALLBACK[zlib.crc32(key.encode()) % len(FALLBACK)]
