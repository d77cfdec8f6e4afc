"""Standard inference: the non-adaptive baseline every utility is compared against."""

from __future__ import annotations

import torch

from tempora_schema.vocabulary import BASELINE_METHOD

from . import register
from .base import MethodContext, TTAMethod


@register
class Standard(TTAMethod):
    """The source model in eval mode, no adaptation (λ is calibrated on this method)."""

    name = BASELINE_METHOD
    family = "baseline"
    norm_free = True
    paper = "No adaptation (source model, eval mode)."
    updates = "nothing"
    overhead = "none"

    def __init__(self, model: torch.nn.Module, context: MethodContext, **params):
        super().__init__(model, context, **params)
        self.model.eval()
        self.model.requires_grad_(False)
        self._finish_setup()

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        self.last_updated = False
        return self.model(x)
