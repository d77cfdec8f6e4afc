"""Sparse-adaptation policies: on which batches a method runs its adapt step (docs/design/design.md §11).

A policy is a method modifier. On a batch the policy adapts, the event is the method's usual
``predict`` then ``adapt``; on any other batch it is ``predict`` alone, so the batch costs only
its prediction (``ℓ = 0``, ``updated = false``). Work a method does inside ``predict`` on every
batch (batch-norm statistics, a second forward) stays where it is.

The rule here is pure (no torch, no clock): the tracer and the live runner both ask it, per
*event* of an episode, whether to adapt, so a trace row j and a live run's j-th event make the
same decision (the replay is step-indexed, §4). The spellings:

================================  ============================================================
``every:K``                       adapt on events 0, K, 2K, … of each episode (``every:1``: always)
``fraction:P[:SEED]``             adapt where a seeded uniform draw for (SEED, episode, event) is
                                  below P; SEED defaults to the run's ``--seed``, so every method
                                  of a group adapts on the same events
``entropy:THRESHOLD``             adapt when the prediction's mean entropy, divided by ln C, exceeds
                                  THRESHOLD (decided after the prediction, from its logits)
``warmup:N``                      adapt on the first N events of each episode, then predict only
================================  ============================================================

``every:1`` and ``fraction:1`` adapt on every event: they are the method without a policy, and
parse to ``None`` (the same trace, the same name).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass

from tempora_schema.errors import OptionError

#: The policy kinds, in the order the documentation lists them.
KINDS = ("every", "fraction", "entropy", "warmup")
#: Separator of a method and its policy in a method label: ``tent@every:4``.
LABEL_SEP = "@"
_NUMBER = r"[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?"


@dataclass(frozen=True)
class Policy:
    """One parsed policy. ``value`` is K (every), P (fraction), the threshold (entropy) or N
    (warmup); ``seed`` is the explicit seed of a fraction policy (None: the run's seed)."""

    kind: str
    value: float
    seed: int | None = None

    # -------------------------------------------------------------------- naming
    def spec(self, run_seed: int | None = None) -> str:
        """The canonical spelling, as the trace's metadata ``policy`` records it. A fraction
        policy's seed is left out when it is the run's own seed (``run_seed``), so seed
        replicates of one setting carry one label and pool."""
        if self.kind in ("every", "warmup"):
            return f"{self.kind}:{int(self.value)}"
        text = f"{self.kind}:{self.value:g}"
        if self.kind == "fraction" and self.seed is not None and self.seed != run_seed:
            text += f":{self.seed}"
        return text

    def describe(self) -> str:
        """Plain words: ``adapting every 4th batch``."""
        if self.kind == "every":
            k = int(self.value)
            return f"adapting every {k}{_ordinal(k)} batch"
        if self.kind == "fraction":
            return f"adapting on a random {100 * self.value:g} % of batches"
        if self.kind == "entropy":
            return f"adapting when the mean entropy exceeds {self.value:g} × ln C"
        return f"adapting on the first {int(self.value)} batches of each episode"

    @property
    def nominal_rate(self) -> float | None:
        """The share of events the policy adapts on in the long run (None: data-dependent)."""
        if self.kind == "every":
            return 1.0 / self.value
        if self.kind == "fraction":
            return self.value
        return None

    # -------------------------------------------------------------------- deciding
    def decides_before(self) -> bool:
        """True when the decision is known before the event runs (all kinds but ``entropy``)."""
        return self.kind != "entropy"

    def adapts(self, event: int, episode: str, run_seed: int) -> bool:
        """Whether event ``event`` (0-based, counted from the episode's start) adapts; for
        ``entropy`` use :meth:`adapts_at_entropy` instead."""
        if self.kind == "every":
            return event % int(self.value) == 0
        if self.kind == "warmup":
            return event < int(self.value)
        if self.kind == "fraction":
            return fraction_draw(run_seed if self.seed is None else self.seed, episode, event) < self.value
        raise ValueError("an entropy policy decides from the prediction: use adapts_at_entropy")

    def adapts_at_entropy(self, normalised_entropy: float) -> bool:
        """``entropy``: adapt when the batch's mean entropy / ln C exceeds the threshold."""
        return normalised_entropy > self.value


def _ordinal(k: int) -> str:
    if 10 <= k % 100 <= 20:
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")


def fraction_draw(seed: int, episode: str, event: int) -> float:
    """A uniform number in [0, 1) fixed by (seed, episode, event) alone: the same on every
    machine, for every method and in every process (BLAKE2b of the three, first 53 bits)."""
    digest = hashlib.blake2b(f"{int(seed)}\x1f{episode}\x1f{int(event)}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") >> 11) / float(1 << 53)


def parse_policy(text: str) -> Policy | None:
    """Parse one policy; ``None`` for a policy that adapts on every batch (``every:1``,
    ``fraction:1``, ``none``). Raises :class:`OptionError` with a one-line message."""
    raw = str(text).strip()
    if raw in ("", "none"):
        return None
    kind, _, rest = raw.partition(":")
    if kind not in KINDS:
        raise OptionError(f"--policy '{raw}': the kind must be one of {', '.join(KINDS)} (every:K, fraction:P[:SEED], entropy:T, warmup:N)")
    parts = rest.split(":") if rest else []
    if kind == "every" or kind == "warmup":
        if len(parts) != 1 or not re.fullmatch(r"[0-9]+", parts[0]):
            raise OptionError(f"--policy '{raw}': {kind} takes one whole number ({kind}:{'K' if kind == 'every' else 'N'})")
        n = int(parts[0])
        if kind == "every" and n < 1:
            raise OptionError(f"--policy '{raw}': K must be ≥ 1")
        if kind == "every" and n == 1:
            return None
        if n > 2**31 - 1:
            raise OptionError(f"--policy '{raw}': {n} is too large")
        return Policy(kind, float(n))
    if kind == "fraction":
        if len(parts) not in (1, 2) or not re.fullmatch(_NUMBER, parts[0]):
            raise OptionError(f"--policy '{raw}': fraction takes a share and an optional seed (fraction:P[:SEED])")
        p = float(parts[0])
        if not 0 < p <= 1:
            raise OptionError(f"--policy '{raw}': the share P must be in (0, 1]")
        seed = None
        if len(parts) == 2:
            if not re.fullmatch(r"[0-9]+", parts[1]) or int(parts[1]) > 2**63 - 1:
                raise OptionError(f"--policy '{raw}': the seed must be a whole number ≥ 0")
            seed = int(parts[1])
        return None if p == 1 else Policy(kind, p, seed)
    # entropy
    if len(parts) != 1 or not re.fullmatch(_NUMBER, parts[0]):
        raise OptionError(f"--policy '{raw}': entropy takes one threshold (entropy:T, T ≥ 0 as a share of ln C)")
    t = float(parts[0])
    if not math.isfinite(t):
        raise OptionError(f"--policy '{raw}': the threshold must be finite")
    return Policy(kind, t)


def parse_policies(text: str) -> list[Policy | None]:
    """A comma-separated list (``every:1,2,4``-style shorthands included: a bare number after
    a kind repeats that kind), duplicates removed in order; never empty."""
    out: list[Policy | None] = []
    kind = None
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            raise OptionError(f"--policy '{text}': an empty item in the list")
        if ":" not in item and item != "none" and kind is not None:
            item = f"{kind}:{item}"
        elif ":" in item:
            kind = item.split(":", 1)[0]
        policy = parse_policy(item)
        if policy not in out:
            out.append(policy)
    return out


def policy_label(method: str, policy: str | None) -> str:
    """``tent`` or ``tent@every:4``: how the simulator and the report name a method under a policy."""
    return method if not policy else f"{method}{LABEL_SEP}{policy}"


def split_label(label: str) -> tuple[str, str | None]:
    """The inverse of :func:`policy_label`: ``("tent", "every:4")`` or ``("tent", None)``."""
    method, sep, policy = str(label).partition(LABEL_SEP)
    return method, (policy if sep else None)


def file_part(policy: str) -> str:
    """A policy as part of a file name: ``every:4`` → ``every4``, ``fraction:0.25:7`` →
    ``fraction0.25-7`` (no colons in file names)."""
    kind, _, rest = policy.partition(":")
    return kind + rest.replace(":", "-")


def validate_policy_metadata(value: object) -> str | None:
    """The optional metadata key ``policy``: absent/None, or a canonical policy spelling.
    Returns the value; raises ValueError with the rule otherwise."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"metadata 'policy' must be a policy string or null, got {value!r}")
    try:
        parsed = parse_policy(value)
    except OptionError as exc:
        raise ValueError(f"metadata 'policy' {value!r} is not a policy ({exc})") from None
    if parsed is None:
        raise ValueError(f"metadata 'policy' {value!r} adapts on every batch: such a trace records no policy")
    return value
