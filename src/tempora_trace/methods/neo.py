"""NEO: re-centre penultimate features on the running mean of the target stream.

Murphy et al., "NEO: No-Optimization Test-Time Adaptation through Latent Re-Centering",
2025 (arXiv:2510.05635). Under neural collapse the source class means sit symmetrically about
the origin; a domain shift translates the target features away from it. NEO keeps the mean of
every target feature seen so far (a cumulative, count-weighted mean, updated with the current
batch *before* centring, as in the authors' code) and subtracts it before the classifier.
No gradients, no parameter changes: all of the work precedes the output, so it is all in
``predict`` and ``adapt`` is empty (ℓ ≈ 0).

Frozen mode centres with the mean reached so far and stops updating it (the authors'
``adapt=False`` path); the Tempora reference instead falls back to the uncentred source model
when frozen (``profile=paper``). That matters wherever NEO freezes: its centring is intrinsic
overhead, so under a tight amortised budget it can exhaust the budget like any other method.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from . import register
from .base import Departure, MethodContext, MethodError, TTAMethod, classifier_head


@register
class NEO(TTAMethod):
    name = "neo"
    family = "gradient-free"
    paper = "Murphy et al., NEO: No-Optimization Test-Time Adaptation through Latent Re-Centering, arXiv:2510.05635 (2025)"
    updates = "running mean of penultimate features (no parameters)"
    overhead = "intrinsic: one mean and one subtraction before the classifier"
    departures = (
        Departure(
            point="frozen inference",
            default="centred with the mean reached so far, which stops moving",
            reference="the uncentred source model",
            reason="the authors' adapt=False path: what NEO has learnt is the mean, and freezing "
            "should keep it, as it keeps other methods' adapted weights",
        ),
    )

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        model.eval()
        model.requires_grad_(False)
        self.head = classifier_head(model, context.model_name or None)
        p = self.head.weight
        self.feature_mean = torch.zeros(self.head.in_features, device=p.device, dtype=p.dtype)
        self.sample_count = 0
        self._finish_setup()

    def _centre(self, module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """Forward pre-hook on the classifier: update the running mean, then centre."""
        features = inputs[0]
        if features.dim() != 2:
            raise MethodError(f"neo expects [batch, features] at the classifier, got shape {tuple(features.shape)}")
        if not self.frozen:
            n = features.size(0)
            total = self.sample_count + n
            self.feature_mean = self.feature_mean * (self.sample_count / total) + features.mean(0) * (n / total)
            self.sample_count = total
        return (features - self.feature_mean, *inputs[1:])

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        # the running mean moves with every unfrozen batch, and every later prediction uses it
        self.last_updated = not self.frozen
        if self.frozen and self.paper_profile:
            return self.model(x)  # Tempora reference: frozen NEO is the uncentred source model
        handle = self.head.register_forward_pre_hook(self._centre)
        try:
            return self.model(x)
        finally:
            handle.remove()

    def extra_state(self) -> dict[str, Any]:
        return {"feature_mean": self.feature_mean.clone(), "sample_count": self.sample_count}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.feature_mean = state["feature_mean"].clone()
        self.sample_count = int(state["sample_count"])
