"""Tent: fully test-time adaptation by entropy minimisation.

Wang, Shelhamer, Liu, Olshausen & Darrell, "Tent: Fully Test-Time Adaptation by Entropy
Minimization", ICLR 2021. Predict-then-adapt: the prediction is the forward pass on the
batch (train-mode normalisation, batch statistics); afterwards one SGD step (momentum 0.9)
on the mean softmax entropy updates only the affine parameters of the normalisation layers.
Learning rate 0.00025 (the paper's ImageNet setting at batch 64; the Tempora reference uses it
for every dataset and batch size) and 0.001 for ViT-B/16, as in the Tempora reference.
BatchNorm running statistics are reset (``source_stats='discard'``) and tracked over the target
stream with momentum 0.1 so frozen inference has valid buffers (DESIGN §5).
"""

from __future__ import annotations

from typing import Any

import torch

from . import register
from .base import MethodContext, TTAMethod, configure_batchnorm, norm_affine_params, softmax_entropy


@register
class Tent(TTAMethod):
    """Entropy minimisation on normalisation affine parameters."""

    name = "tent"
    family = "gradient-based"
    paper = "Wang et al., Tent: Fully Test-Time Adaptation by Entropy Minimization (ICLR 2021)"
    updates = "normalisation affine parameters (SGD)"
    overhead = "extrinsic (backward + step)"

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        lr = 0.001 if context.norm_kind == "ln" else 0.00025
        return {"lr": lr, "sgd_momentum": 0.9, "bn_momentum": 0.1, "source_stats": "discard"}

    def __init__(self, model: torch.nn.Module, context: MethodContext, **params):
        super().__init__(model, context, **params)
        self.model.eval()
        self.model.requires_grad_(False)
        bns = configure_batchnorm(self.model, self.params["source_stats"], self.params["bn_momentum"])
        self.set_train_modules(bns)
        params_to_adapt = norm_affine_params(self.model)
        for p in params_to_adapt:
            p.requires_grad_(True)
        self.optimizer = torch.optim.SGD(params_to_adapt, lr=self.params["lr"], momentum=self.params["sgd_momentum"])
        self._loss: torch.Tensor | None = None
        self._finish_setup()

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        self.last_updated = False
        if self.frozen:
            with torch.no_grad():
                self._loss = None
                return self.model(x)
        with torch.enable_grad():
            logits = self.model(x)
            self._loss = softmax_entropy(logits).mean()
        return logits.detach()

    def adapt(self) -> None:
        if self._loss is None:
            return
        self._loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._loss = None
        self.last_updated = True
