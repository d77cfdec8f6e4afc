"""Tent: fully test-time adaptation by entropy minimisation.

Wang, Shelhamer, Liu, Olshausen & Darrell, "Tent: Fully Test-Time Adaptation by Entropy
Minimization", ICLR 2021. Predict-then-adapt: the prediction is the forward pass on the
batch (train-mode normalisation, batch statistics); afterwards one SGD step (momentum 0.9)
on the mean softmax entropy updates only the affine parameters of the normalisation layers.
Learning rate 0.00025 (the paper's ImageNet setting at batch 64; the Tempora reference uses it
for every dataset and batch size) and 0.001 for ViT-B/16, as in the Tempora reference.
BatchNorm running statistics are reset (``source_stats='discard'``) and tracked over the target
stream with momentum 0.1 so frozen inference has valid buffers (docs/design.md §5).
"""

from __future__ import annotations

from typing import Any

import torch

from . import register
from ._common import GradientMethod, check_params, default_lr, require_norm
from .base import MethodContext, configure_batchnorm, norm_affine_params, softmax_entropy


@register
class Tent(GradientMethod):
    """Entropy minimisation on normalisation affine parameters."""

    name = "tent"
    paper = "Wang et al., Tent: Fully Test-Time Adaptation by Entropy Minimization (ICLR 2021)"
    updates = "normalisation affine parameters (SGD)"
    overhead = "extrinsic (backward + step)"

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        return {"lr": default_lr(context), "momentum": 0.9, "bn_momentum": 0.1, "source_stats": "discard"}

    def __init__(self, model: torch.nn.Module, context: MethodContext, **params):
        super().__init__(model, context, **params)
        check_params(self, non_negative=("lr",), fractions=("momentum", "bn_momentum"))
        require_norm(self, model)
        model.eval()
        self.set_train_modules(configure_batchnorm(model, self.params["source_stats"], self.params["bn_momentum"]))
        self.optimizer = self._build_sgd(norm_affine_params(model))
        self._finish_setup()

    def _update(self, x: torch.Tensor, logits: torch.Tensor) -> bool:
        # Predict-then-adapt: the entropy of the very forward that produced the prediction.
        self._step(softmax_entropy(logits).mean())
        return True
