"""How the replay engine plays a protocol: the options every kernel and oracle call reads.

Built once per sweep from the resolved sweep options
(:meth:`tempora_sim.sweeps.options.SweepOptions.resolve`), where each is declared and checked,
and handed as one typed value to every protocol's replay, the idle-effect replay and the
scenarios' general kernel.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReplayOptions:
    """The checked ``--queue``, ``--sync``, ``--skipped``, ``--fallback`` and ``--budget-rule``."""

    #: the discrete queue capacity b (0 drops arrivals while busy)
    queue: int
    #: "buffered", or "strict" for the +2 synchronisation (pickup only at arrivals)
    sync: str
    #: the score of a skipped batch: "null" (0) or "random" (1/C)
    skipped: str
    #: skipped batches get the adapting model's forward-only prediction
    fallback: bool
    #: the amortised cut-off: "strict" (the paper) or "overshoot"
    budget_rule: str

    @property
    def strict_sync(self) -> bool:
        """The kernels' flag for ``sync == "strict"``."""
        return self.sync == "strict"

    @property
    def overshoot(self) -> bool:
        """The kernels' flag for ``budget_rule == "overshoot"``."""
        return self.budget_rule == "overshoot"

    def skip_mode(self, K) -> int:
        """The kernels' code (constants of ``K``, :mod:`tempora_sim.engine.kernels`, passed in so
        that Numba loads only where a kernel runs) for how a skipped batch is scored."""
        return K.SKIP_FALLBACK if self.fallback else (K.SKIP_RANDOM if self.skipped == "random" else K.SKIP_NULL)
