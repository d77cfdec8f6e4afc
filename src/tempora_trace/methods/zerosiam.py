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
from ._augment import ProjectorView, require_gn_or_ln
from .base import MethodContext, TTAMethod, norm_affine_params, softmax_entropy


def symmetric_kl(clean_logits: torch.Tensor, view_logits: torch.Tensor) -> torch.Tensor:
    """Mean over samples of KL(p‖q) + KL(q‖p), with p the (detached) clean prediction and q
    the projector view's."""
    log_p = clean_logits.detach().log_softmax(1)
    log_q = view_logits.log_softmax(1)
    return ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum(1).mean()


@register
class ZeroSIAM(TTAMethod):
    """ZeroSIAM (Chen et al., 2025/2026). A projector (identity-initialised d×d linear map,
    no bias) is inserted before the classifier for a second view of the same batch; the loss
    is the entropy of that projector view plus the symmetric KL between the clean (stop-
    gradient) and projector views, which keeps the projector from collapsing onto trivial
    solutions. Updated: norm-layer affine parameters (SGD momentum 0.9) and the projector with
    its own SGD optimiser (momentum 0.9), whose state is part of the method's snapshot.

    Prediction boundary: the clean backbone forward is the prediction; nothing back-propagates
    through it (the KL uses it detached), so ``predict`` runs it without a graph. The projector
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

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        vit = context.norm_kind == "ln"
        return {
            "lr": 0.005 if vit else 0.0025,
            "projector_lr": 0.005 if vit else 0.025,
            "momentum": 0.9,
        }

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        require_gn_or_ln(model, "zerosiam")
        p = self.params
        model.requires_grad_(False)
        model.eval()
        self.trainable = norm_affine_params(model)
        for q in self.trainable:
            q.requires_grad_(True)
        self.view = ProjectorView(model)
        self.optimizer = torch.optim.SGD(self.trainable, lr=p["lr"], momentum=p["momentum"])
        self.projector_optimizer = torch.optim.SGD([self.view.projector.weight], lr=p["projector_lr"], momentum=p["momentum"])
        self._pending: tuple[torch.Tensor, torch.Tensor] | None = None
        self._finish_setup()

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        self._pending = None
        with torch.no_grad():
            logits = self.model(x)
        if not self.frozen:
            self._pending = (x, logits)
        return logits

    def adapt(self) -> None:
        self.last_updated = False
        if self._pending is None:
            return
        x, clean = self._pending
        self._pending = None
        with torch.enable_grad(), self.view.active():
            view = self.model(x)
            loss = softmax_entropy(view).mean() + symmetric_kl(clean, view)
        self.optimizer.zero_grad(set_to_none=True)
        self.projector_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.projector_optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.projector_optimizer.zero_grad(set_to_none=True)
        self.last_updated = True

    def extra_state(self) -> dict[str, Any]:
        return {
            "projector": self.view.projector.weight.detach().clone(),
            "projector_optimizer": self.projector_optimizer.state_dict(),
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self._pending = None
        with torch.no_grad():
            self.view.projector.weight.copy_(state["projector"])
        self.projector_optimizer.load_state_dict(state["projector_optimizer"])


__all__ = ["ZeroSIAM", "symmetric_kl"]
