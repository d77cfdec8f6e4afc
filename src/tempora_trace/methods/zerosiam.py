"""ZeroSIAM: an asymmetric Siamese for collapse-free test-time entropy minimisation.

Chen, G., Niu, S., Chen, D., Yang, J., Zhang, Z., Tan, M., Wu, P. and Shen, Z. "ZeroSiam: An
Efficient Siamese for Test-Time Entropy Optimization without Collapse." arXiv:2509.23183, 2025
(cited by the Tempora paper as Chen et al., 2026).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from . import register
from .augment import DetachedTargetMethod, ProjectorView
from .base import AS_DEFAULT, Departure, MethodContext, softmax_entropy
from .gradient import is_vit


def symmetric_kl(clean_logits: torch.Tensor, view_logits: torch.Tensor) -> torch.Tensor:
    """Mean over samples of KL(p‖q) + KL(q‖p), with p the (detached) clean prediction and q
    the projector view's."""
    log_p = clean_logits.detach().log_softmax(1)
    log_q = view_logits.log_softmax(1)
    return ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum(1).mean()


@register
class ZeroSIAM(DetachedTargetMethod):
    """ZeroSIAM (Chen et al., 2025/2026). A projector (identity-initialised d×d linear map,
    no bias) is inserted before the classifier for a second view of the same batch; the loss
    is the entropy of that projector view plus the symmetric KL between the clean (stop-
    gradient) and projector views, which keeps the projector from collapsing onto trivial
    solutions. Updated: norm-layer affine parameters (SGD momentum 0.9) and the projector with
    its own SGD optimiser (momentum 0.9), whose state is part of the method's snapshot.

    Prediction boundary: the clean backbone forward is the prediction; nothing back-propagates
    through it (the KL uses it detached), so by default ``predict`` runs it without a graph. The projector
    forward, backward and both optimiser steps are ``adapt``.

    Compatible models: those with the authors' settings, GroupNorm (ResNet-50-GN: lr 0.0025,
    projector lr 0.025; used for ``demo-resnet-gn``) and LayerNorm (ViT-B/16: lr 0.005,
    projector lr 0.005).
    """

    name = "zerosiam"
    family = "gradient-based"
    compatible_norms = frozenset({"gn", "ln"})
    paper = "Chen et al., ZeroSiam: An Efficient Siamese for Test-Time Entropy Optimization without Collapse, arXiv 2509.23183"
    updates = "norm-layer affine parameters + projector head (separate optimiser)"
    overhead = "adapt: projector-view grad forward, backward, two optimiser steps"

    non_negative_options = ("lr", "projector_lr", "momentum")
    fraction_options = ()
    departures = (
        Departure(
            point="clean forward",
            default="without autograd (it is a detached target)",
            reference="with autograd, the unused graph kept until the update is done",
            reason="no gradient can flow through it; recording one only adds intrinsic time and peak memory",
        ),
        Departure(
            point="optimiser state at a reset",
            default="both optimisers (norm layers and projector) return to their source state",
            reference=AS_DEFAULT,
            authors="only the projector's optimiser is reset between distributions",
            reason="a reset returns the whole method to its source state",
        ),
    )

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        vit = is_vit(context)
        return {
            "lr": 0.005 if vit else 0.0025,
            "projector_lr": 0.005 if vit else 0.025,
            "momentum": 0.9,
        }

    def prepare(self, model: nn.Module) -> None:
        self.view = ProjectorView(model)
        self.projector_optimizer = torch.optim.SGD(
            [self.view.projector.weight], lr=self.params["projector_lr"], momentum=self.params["momentum"], foreach=True
        )

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        self.trainable = [q for _, q in self.adapted]

    def update(self, x: torch.Tensor, clean: torch.Tensor) -> bool:
        with self.view.active():
            view = self.model(x)
        loss = softmax_entropy(view).mean() + symmetric_kl(clean, view)
        loss.backward()
        self.optimizer.step()
        self.projector_optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.projector_optimizer.zero_grad(set_to_none=True)
        return True

    def extra_state(self) -> dict[str, Any]:
        return {
            "projector": self.view.projector.weight.detach().clone(),
            "projector_optimizer": self.projector_optimizer.state_dict(),
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            self.view.projector.weight.copy_(state["projector"])
        self.projector_optimizer.load_state_dict(state["projector_optimizer"])


__all__ = ["ZeroSIAM", "symmetric_kl"]
