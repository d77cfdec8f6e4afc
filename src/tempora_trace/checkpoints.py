"""Frozen-mode checkpoints: which steps to freeze at, and which later batches to score.

A checkpoint ``m`` is the model after its first ``m`` adaptation steps (docs/design/design.md §3). The default
schedule is dense early — {0, 1, …, 16} — then √2-geometric, ⌈16·√2^k⌉, below the episode
length N, so the simulator's amortised replay finds an exact checkpoint or a near one for any
budget. Budget checkpoints add the exact cut-off steps of given budgets, found online.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np


def default_schedule(num_batches: int, dense: int = 16) -> list[int]:
    """{0..dense} ∪ {⌈dense·√2^k⌉ : k ≥ 0}, all < num_batches."""
    steps = {m for m in range(dense + 1) if m < num_batches}
    k = 0
    while True:
        m = math.ceil(dense * math.sqrt(2) ** k - 1e-9)
        if m >= num_batches:
            break
        steps.add(m)
        k += 1
    return sorted(steps)


def sample_steps(m: int, num_batches: int, sample: int | None) -> list[int]:
    """The later steps (≥ m) a checkpoint is scored on: all, or ``sample`` evenly spaced ones
    including the first and last."""
    later = num_batches - m
    if later <= 0:
        return []
    if sample is None or later <= sample:
        return list(range(m, num_batches))
    picks = np.round(np.linspace(m, num_batches - 1, sample)).astype(int)
    return sorted(set(int(p) for p in picks))


class BudgetCutoffs:
    """Online cut-off steps of overhead budgets under both rules (docs/design/design.md §4, amortised).

    With ``c_j = max(0, δ_j − λ)`` and ``S_j = Σ_{i≤j} c_i`` (1-based j):
    ``strict`` m = max{j : S_j ≤ B} — known only when step m+1 overshoots, so the runner keeps
    a snapshot of the state before each step while a strict cut-off is pending;
    ``overshoot`` m = min{j : S_j ≥ B} — known right after step m.
    A budget never reached gives m = N, which needs no checkpoint (no later batches).
    """

    def __init__(self, budgets_ms: Iterable[float], lambda_ms: float):
        self.budgets = sorted(set(float(b) for b in budgets_ms))
        self.lambda_ms = float(lambda_ms)
        self.reset()

    def reset(self) -> None:
        self.spent = 0.0
        self.pending_strict = list(self.budgets)
        self.pending_overshoot = list(self.budgets)

    @property
    def strict_pending(self) -> bool:
        return bool(self.pending_strict)

    def observe(self, step: int, delta_ms: float) -> tuple[list[int], list[int]]:
        """Account step ``step`` (0-based) and return the newly known (strict, overshoot) cut-offs."""
        self.spent += max(0.0, delta_ms - self.lambda_ms)
        j = step + 1
        strict = [b for b in self.pending_strict if self.spent > b]
        overshoot = [b for b in self.pending_overshoot if self.spent >= b]
        self.pending_strict = [b for b in self.pending_strict if b not in strict]
        self.pending_overshoot = [b for b in self.pending_overshoot if b not in overshoot]
        return ([j - 1] if strict else []), ([j] if overshoot else [])


def parse_int_list(text: str | Sequence[int] | None) -> list[int]:
    if text is None or text == "":
        return []
    if isinstance(text, str):
        return [int(t) for t in text.split(",") if t.strip()]
    return [int(t) for t in text]
