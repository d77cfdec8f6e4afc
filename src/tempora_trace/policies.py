"""A sparse-adaptation policy at run time: the gate the tracer and the live runner share
(docs/design/design.md §11).

The rule itself is pure and lives in :mod:`tempora_schema.policies`; this module keeps the
per-episode event counter and computes the one data-dependent input, the prediction's entropy.
:func:`~tempora_trace.timing.timed_event` asks the gate before each adapting event
(:meth:`PolicyGate.before`) and, for an entropy policy, after the prediction
(:meth:`PolicyGate.after`); both runners reset it at each episode start, so the tracer's row j
and a live run's j-th event of an episode make the same decision.
"""

from __future__ import annotations

import math

import torch

from tempora_schema.policies import Policy, parse_policy

from .errors import ConfigError
from .methods import builtin_methods, get_method
from .methods.base import TTAMethod


def mean_normalised_entropy(logits: torch.Tensor) -> float:
    """Mean over the batch of the softmax entropy of ``logits`` divided by ln C (C = the
    number of outputs): 0 for one-hot predictions, 1 for uniform ones. Log-probabilities give
    the same value as the logits they came from."""
    logits = logits.detach().float()
    c = logits.shape[1]
    if c < 2:
        return 0.0
    ent = -(logits.softmax(1) * logits.log_softmax(1)).sum(1)
    return float(ent.mean()) / math.log(c)


def adapts_after_prediction(method_cls: type[TTAMethod]) -> bool:
    """True when the method has an adapt step (work after the prediction) a policy can skip."""
    return method_cls.adapt is not TTAMethod.adapt


def check_policy_method(method_cls: type[TTAMethod], policy: str | None) -> None:
    """A policy needs a method with an adapt step; ConfigError (one line) otherwise."""
    if policy is None or adapts_after_prediction(method_cls):
        return
    # the built-ins only: naming them imports no installed plugin (one that fails to import
    # would otherwise replace this line with its own error)
    adapting = [name for name in builtin_methods() if adapts_after_prediction(get_method(name))]
    raise ConfigError(
        f"--policy {policy}: method '{method_cls.name}' has no adapt step (its work is inside the prediction), so a "
        f"policy has nothing to skip; built-in methods that adapt: {', '.join(adapting)}"
    )


class PolicyGate:
    """The policy of one run: ``start_episode`` at each episode start, then per adapting event
    ``before()`` (True/False, or None when the prediction decides) and, if None, ``after(logits)``."""

    def __init__(self, policy: str, run_seed: int):
        parsed = parse_policy(policy)
        if parsed is None:
            raise ValueError(f"policy {policy!r} adapts on every batch: run without a gate")
        self.policy: Policy = parsed
        self.run_seed = int(run_seed)
        self.episode = ""
        #: adapting events of the current episode decided so far
        self.event = 0
        #: (event, adapted, normalised entropy or None) of the current episode, for diagnostics
        self.decisions: list[tuple[int, bool, float | None]] = []

    def start_episode(self, name: str) -> None:
        self.episode = name
        self.event = 0
        self.decisions = []

    def before(self) -> bool | None:
        """The decision for the next event when it is known before the event runs."""
        if not self.policy.decides_before():
            return None
        adapt = self.policy.adapts(self.event, self.episode, self.run_seed)
        self.decisions.append((self.event, adapt, None))
        self.event += 1
        return adapt

    def after(self, logits: torch.Tensor) -> bool:
        """An entropy policy's decision from the event's prediction (timed inside ℓ)."""
        h = mean_normalised_entropy(logits)
        adapt = self.policy.adapts_at_entropy(h)
        self.decisions.append((self.event, adapt, h))
        self.event += 1
        return adapt
