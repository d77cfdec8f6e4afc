"""Plain-Python rank oracles, written apart from the library's numpy code they check."""

from __future__ import annotations


def average_ranks(xs: list[float]) -> list[float]:
    """1-based ranks; tied values get the mean of the positions they span."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks
