"""T3A: test-time template adjustment, a back-propagation-free prototype classifier.

Iwasawa & Matsuo, "Test-Time Classifier Adjustment Module for Model-Agnostic Domain
Generalization", NeurIPS 2021. The network is never changed. T3A keeps a *support set* of
penultimate feature vectors, each with the class the source classifier gives it and that
prediction's entropy. It starts from the rows of the final linear layer's weight (each row is a
feature vector; its label and entropy are the classifier's own on it). Per batch:

1. the features ``z`` of the batch and the source classifier's logits on them (the head of
   :func:`tempora_trace.models.feature_head`, found for every model the tracer builds);
2. every sample joins the support set with its predicted class (one-hot) and entropy;
3. per class, only the ``filter_K`` supports of lowest entropy are kept (``-1``: all);
4. the prototypes are the L2-normalised sums of each class's L2-normalised supports, and the
   prediction is ``z @ prototypes`` (no bias), the authors' formula.

The support set after step 3 already holds the batch, so all of it precedes the output: the
whole method is in ``predict`` (timed in ``e``), and ``adapt`` is empty (``ℓ`` ≈ 0). T3A
changes no parameter, but its support set changes its later predictions: ``updated`` is True
for a batch whose samples entered the support set (state that affects later outputs), so the
amortised replay counts T3A as adapting. Frozen mode predicts with the support set reached so
far and adds nothing to it; ``reset`` returns to the classifier's own rows.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import ConfigError
from ..models.heads import feature_head
from . import register
from .base import Departure, MethodContext, MethodError, TTAMethod, softmax_entropy
from .gradient import check_params


def select_supports(labels: torch.Tensor, entropy: torch.Tensor, num_classes: int, filter_k: int) -> torch.Tensor:
    """Indices of the supports kept: per class (in class order), the ``filter_k`` of lowest
    entropy in ascending entropy (ties in insertion order); every support when ``filter_k`` is -1."""
    order = torch.sort(entropy, stable=True).indices
    kept = []
    for c in range(num_classes):
        of_class = order[labels[order] == c]
        kept.append(of_class if filter_k < 0 else of_class[:filter_k])
    return torch.cat(kept)


def prototype_logits(z: torch.Tensor, supports: torch.Tensor, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """``z @ normalize(normalize(supports)ᵀ · onehot(labels), dim=0)``: T3A's prediction."""
    onehot = F.one_hot(labels, num_classes).to(supports.dtype)
    prototypes = F.normalize(supports, dim=1).T @ onehot
    return z @ F.normalize(prototypes, dim=0)


@register
class T3A(TTAMethod):
    """Prototype classifier over an entropy-filtered support set of penultimate features.
    Time split: everything (features, support-set update, prototypes) is ``predict`` (``e``);
    ``adapt`` is empty (``ℓ`` ≈ 0)."""

    name = "t3a"
    family = "gradient-free"
    norm_free = True
    paper = "Iwasawa & Matsuo, Test-Time Classifier Adjustment Module for Model-Agnostic Domain Generalization (T3A), NeurIPS 2021"
    updates = "support set of penultimate features (no parameters)"
    overhead = "intrinsic: support-set filter and prototype classifier before the output"
    departures = (
        Departure(
            point="filter_K = -1",
            default="keeps every support",
            reference="as default",
            reason="-1 means no filtering in the authors' hyperparameter space; their code's slice [:-1] "
            "drops each class's highest-entropy support instead",
            authors="drops the highest-entropy support of each class",
        ),
    )

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        """``filter_K`` 100: the authors' default (DomainBed's hyperparameter registry)."""
        return {"filter_K": 100}

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        check_params(self)
        if self.params["filter_K"] == 0 or self.params["filter_K"] < -1:
            raise MethodError(f"method 't3a': option filter_K must be -1 (keep all) or >= 1, not {self.params['filter_K']}")
        model.eval()
        model.requires_grad_(False)
        try:
            self.head = feature_head(model, context.model_name or None)
        except ConfigError as exc:
            raise MethodError(f"method 't3a' needs the model's features and classifier: {exc}") from None
        self.num_classes = self.head.weight.shape[0]
        with torch.no_grad():
            warm = self.head.weight.detach().clone()
            logits = self.head.logits(warm)
        #: the support set: features, predicted class, entropy of that prediction
        self.supports = warm
        self.labels = logits.argmax(1)
        self.entropy = softmax_entropy(logits)

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        z = self.head.features(x)
        if self.frozen:
            self.last_updated = False
            return prototype_logits(z, self.supports, self.labels, self.num_classes)
        logits = self.head.logits(z)
        before = self.supports.shape[0]
        supports = torch.cat([self.supports, z])
        labels = torch.cat([self.labels, logits.argmax(1)])
        entropy = torch.cat([self.entropy, softmax_entropy(logits)])
        kept = select_supports(labels, entropy, self.num_classes, int(self.params["filter_K"]))
        self.supports, self.labels, self.entropy = supports[kept], labels[kept], entropy[kept]
        # the set changed iff a new sample was kept (one only leaves when a newer one displaces it)
        self.last_updated = bool((kept >= before).any())
        return prototype_logits(z, self.supports, self.labels, self.num_classes)

    def extra_state(self) -> dict[str, Any]:
        return {"supports": self.supports.clone(), "labels": self.labels.clone(), "entropy": self.entropy.clone()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.supports = state["supports"].clone()
        self.labels = state["labels"].clone()
        self.entropy = state["entropy"].clone()
