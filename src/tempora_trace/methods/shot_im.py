"""SHOT-IM: information maximisation on the whole feature extractor, classifier frozen.

Liang et al., "Do We Really Need to Access the Source Data? Source Hypothesis Transfer for
Unsupervised Domain Adaptation", ICML 2020 (arXiv:2002.08546); SHOT-IM is SHOT without the
pseudo-label term. The loss is the mean per-sample prediction entropy minus the entropy of the
batch-mean prediction (``ε = 1e-5`` inside its log, as in the authors' code): confident *and*
diverse predictions, which prevents collapse onto one class. Following the source-hypothesis
idea, the classifier (the final linear layer) stays fixed and every other parameter is updated,
with SGD (lr 0.00025, momentum 0.9 at batch 64, as the Tempora paper runs the Tent family).

BatchNorm normalises with batch statistics while adapting, and its running buffers start from
the *source* statistics and keep tracking the stream (``source_stats="keep"``): the property
the Tempora paper identifies as SHOT-IM's resilience to freezing (Table 5 and Table 16).
The forward pass is ``predict``; the loss, backward and step are ``adapt``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from . import register
from ._common import GradientMethod, check_params, default_lr, require_norm
from .base import MethodContext, classifier_head, configure_batchnorm, softmax_entropy


def information_maximisation_loss(logits: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """mean_i H(p_i) − H(mean_i p_i): low conditional entropy, high marginal entropy."""
    marginal = logits.softmax(1).mean(0)
    diversity = -(marginal * torch.log(marginal + eps)).sum()
    return softmax_entropy(logits).mean(0) - diversity


@register
class SHOTIM(GradientMethod):
    name = "shot-im"
    compatible_norms = frozenset({"bn", "gn", "ln"})
    paper = "Liang et al., Do We Really Need to Access the Source Data? Source Hypothesis Transfer (SHOT), ICML 2020"
    updates = "all feature-extractor parameters (classifier frozen); BN buffers start from source statistics"
    overhead = "extrinsic: backward through the whole network and SGD step after the prediction"
    default_source_stats = "keep"

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        return {
            "lr": default_lr(context),
            "momentum": 0.9,
            "diversity_eps": 1e-5,
            "source_stats": cls.default_source_stats,
            "bn_momentum": 0.1,
        }

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        check_params(self, non_negative=("lr", "diversity_eps"), fractions=("momentum", "bn_momentum"))
        require_norm(self, model)
        model.eval()
        self.set_train_modules(configure_batchnorm(model, self.params["source_stats"], self.params["bn_momentum"]))
        self.adapted = self._adapted_parameters(model)
        self.optimizer = self._build_sgd([p for _, p in self.adapted])
        self._finish_setup()

    def _adapted_parameters(self, model: nn.Module) -> list[tuple[str, nn.Parameter]]:
        """Every parameter except the classifier head's (the source hypothesis)."""
        head = {id(p) for p in classifier_head(model).parameters()}
        return [(n, p) for n, p in model.named_parameters() if id(p) not in head]

    def hparams(self) -> dict[str, Any]:
        return {**super().hparams(), "adapted_tensors": len(self.adapted), "adapted_values": sum(p.numel() for _, p in self.adapted)}

    def _update(self, x: torch.Tensor, logits: torch.Tensor) -> bool:
        self._step(information_maximisation_loss(logits, self.params["diversity_eps"]))
        return True
