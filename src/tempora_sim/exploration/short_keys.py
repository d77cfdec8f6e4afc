"""Short codes for the names in a group's rows, so the page's memory does not grow with their length.

Every view pools, resamples and matches its rows many times; with the names replaced by codes of
a few characters right after each replay, a 512-character model or method name costs what a
five-character one does. The codes sort as the names do, so every order the analyses take is
unchanged; the page shows (and escapes) the names themselves.
"""

from __future__ import annotations

from typing import Sequence

import polars as pl

from tempora_sim.protocols import POOLED

# ----------------------------------------------------------------------------- short keys
#: The name columns of a group's replayed rows that the keys stand in for (the other text
#: columns hold the simulator's own words: protocol, parameter, λ rule, arrivals).
KEY_COLUMNS = ("dataset", "model", "device", "stream", "group", "method", "episode")


class ShortKeys:
    """Codes of a few characters for the names in one group's rows (methods, episodes, the
    group's dataset, model, device, stream and label), which the views carry instead.

    A view replays its group on dense grids and pools, resamples and matches the rows many
    times over, row by row; the names (up to 512 characters each) are only shown, so a page
    whose cost grew with them now costs the same for any name. Each code sorts against the
    others, and against the pooled episode's ``__all__``, as its name does: every order the
    analyses take, and so every resample, stays as it was, and the numbers are the same."""

    def __init__(self, members) -> None:
        names: dict[str, set[str]] = {c: set() for c in KEY_COLUMNS}
        for t in members:
            for c in ("dataset", "model", "device", "stream"):
                names[c].add(t.meta[c])
            names["group"].add(t.group.label(seed=False))
            names["method"].add(t.method)
            names["episode"].update(t.episodes, t.replay_arrays.episodes)  # the traces' rows, the replay's series
        self.codes = {c: _sorting_codes(v) for c, v in names.items()}

    def frame(self, frame: pl.DataFrame) -> pl.DataFrame:
        """``frame`` (a sweep's rows or the traces' rows) with every name replaced by its code."""
        return frame.with_columns(
            pl.col(c).replace_strict(codes, return_dtype=pl.String) for c, codes in self.codes.items() if c in frame.columns
        )

    def of(self, column: str, names: Sequence[str]) -> list[str]:
        """The codes of ``names`` (a page's methods or episodes, in its order)."""
        return [self.codes[column][n] for n in names]


def _sorting_codes(names: set[str]) -> dict[str, str]:
    """name -> code: zero-padded ranks that sort as the names do, prefixed so that they fall on
    the same side of ``__all__`` (kept as it is) as the names."""
    ordered = sorted(n for n in names if n != POOLED)
    width = len(str(len(ordered)))
    codes = {n: ("0" if n < POOLED else "~") + str(i).zfill(width) for i, n in enumerate(ordered)}
    return codes | {POOLED: POOLED}
