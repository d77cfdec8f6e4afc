"""AdaBN, online: normalise with test-batch statistics and track them by EMA.

Li, Wang, Shi, Hou & Liu, "Revisiting Batch Normalization For Practical Domain Adaptation",
ICLR Workshop 2017 (arXiv:1603.04779). Applied online as in the Tempora paper: every
BatchNorm layer runs in train mode on the incoming batch and its running statistics follow the
target stream with momentum 0.1, starting from reset buffers (source statistics discarded).
"""

from __future__ import annotations

from typing import Any

import torch

from . import register
from .base import MethodContext, TTAMethod, configure_batchnorm
from .gradient import check_params


@register
class AdaBN(TTAMethod):
    """Batch statistics at prediction time; nothing happens after the prediction."""

    name = "adabn"
    family = "gradient-free"
    compatible_norms = frozenset({"bn"})
    paper = "Li et al., Revisiting Batch Normalization For Practical Domain Adaptation (ICLRW 2017)"
    updates = "BN running statistics"
    overhead = "intrinsic (statistics in the forward pass)"

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        return {"bn_momentum": 0.1, "source_stats": "discard"}

    def __init__(self, model: torch.nn.Module, context: MethodContext, **params):
        super().__init__(model, context, **params)
        check_params(self, fractions=("bn_momentum",))  # `--param bn_momentum=abc`: one line, not a traceback in the forward
        self.model.eval()
        self.model.requires_grad_(False)
        bns = configure_batchnorm(self.model, self.params["source_stats"], self.params["bn_momentum"])
        self.set_train_modules(bns)
        self._finish_setup()

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        # Train-mode BN updates the running buffers in this very forward; frozen (eval-mode)
        # BN leaves them alone.
        self.last_updated = not self.frozen
        return self.model(x)
