"""The profile run (``tempora-trace profile``): a trace run over the first batches of every
episode, timing only; its file is a trace's with ``kind = "profile"``
(:mod:`tempora_schema.prediction`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Sequence

import tempora_schema as schema

from .config import TraceConfig
from .data import Episode
from .errors import ConfigError
from .options import PROFILE_AUTO, PROFILE_MIN_BATCHES, PROFILE_SHARE, profile_auto_rule
from .runner import TraceRun


def profile_length(value: int | str, episodes: Sequence[Episode]) -> int:
    """Batches per episode of a profile: ``value`` itself, or for ``auto``
    :data:`~tempora_trace.options.PROFILE_SHARE` of the stream's longest episode (rounded up),
    at least :data:`~tempora_trace.options.PROFILE_MIN_BATCHES`."""
    if value != PROFILE_AUTO:
        return int(value)
    longest = max((ep.num_batches for ep in episodes), default=0)
    return max(PROFILE_MIN_BATCHES, math.ceil(PROFILE_SHARE * longest - 1e-9))


def profile_episodes(episodes: Sequence[Episode], batches: int) -> list[Episode]:
    """The first ``batches`` batches of every episode, in the stream's own order (a continual
    stream's one episode: its first ``batches``); each episode keeps its name and domains, so a
    profile's rows are a trace's first rows of every episode."""
    out = []
    for ep in episodes:
        left, kept = batches, []
        for orders in ep.batches:
            kept.append(list(orders[: max(left, 0)]))
            left -= len(kept[-1])
        out.append(Episode(ep.name, list(ep.domains), kept))
    return out


class ProfileRun(TraceRun):
    """A profile (``tempora-trace profile``): a trace run over the first
    ``cfg.profile_batches`` batches of every episode of the configured stream, timing only.

    Everything a trace run does to its events is kept — the warm-up, the staging, the clock
    and its rules, the speed probe, the timing-variability measurement after the main pass —
    and no frozen checkpoint is scored. The metadata is a trace's plus ``kind = "profile"`` and
    ``profile_batches`` (the count used), with ``profile_auto`` (the rule) when the count was
    chosen by ``auto`` (:mod:`tempora_schema.prediction`)."""

    def __init__(self, cfg: TraceConfig, echo: Callable[[str], None]):
        if cfg.profile_batches is None:
            raise ConfigError("a profile needs its length (--profile-batches)")
        super().__init__(cfg, echo, claim=False)
        self.length = profile_length(cfg.profile_batches, self.episodes)
        self.episodes = profile_episodes(self.episodes, self.length)
        self.budgets = None
        self.claim_output()

    def metadata(self) -> dict[str, Any]:
        return {
            **super().metadata(),
            "frozen_eval": 0,
            schema.KIND_KEY: schema.KIND_PROFILE,
            schema.PROFILE_BATCHES_KEY: self.length,
            **({schema.PROFILE_AUTO_KEY: profile_auto_rule()} if self.cfg.profile_batches == PROFILE_AUTO else {}),
        }


def profile_run(config: TraceConfig, echo: Callable[[str], None] | None = None) -> Path:
    """Profile ``config`` (its ``profile_batches`` set) and return the path of the written file."""
    cfg = config.resolved()
    if echo is None:
        echo = (lambda s: None) if cfg.quiet else (lambda s: print(s, flush=True))
    return ProfileRun(cfg, echo).run()
