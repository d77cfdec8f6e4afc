"""LAME: Laplacian-regularised maximum-likelihood refinement of the output probabilities.

Boudiaf et al., "Parameter-free Online Test-time Adaptation", CVPR 2022 (arXiv:2201.05718).
The model is never changed. For each batch LAME builds a k-nearest-neighbour affinity ``W`` on
the L2-normalised penultimate features and minimises, over per-sample class distributions
``Y``, the energy ``Σ Y·(−log p) + Σ Y·log Y − Σ Y·(W Y)``: stay close to the model's beliefs,
agree with your neighbours. The concave-convex procedure gives the fixed-point update
``Y ← softmax(log p + W Y)``, iterated until the energy changes by at most ``tol`` relative
(checked from the third iteration on, as the authors do) or ``max_steps`` is reached.

The refined probabilities *are* the prediction, so all of it is in ``predict`` and ``adapt`` is
empty (ℓ ≈ 0). ``predict`` returns their logarithm (log-probabilities). LAME keeps no state
between batches; frozen mode therefore means the unrefined source model, as in the Tempora
reference.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import register
from .base import Departure, MethodContext, TTAMethod, classifier_head
from .gradient import check_params


def knn_affinity(features: torch.Tensor, k: int, drop_first: bool = False) -> torch.Tensor:
    """``W[i, j] = 1`` iff ``j`` is one of the ``k`` nearest other samples of ``i`` (Euclidean);
    not symmetrised, as in the authors' default. ``drop_first`` is the Tempora reference's
    rule: take the ``k + 1`` nearest and drop the first, assumed to be the sample itself (with
    duplicate features it may be another sample, and the sample becomes its own neighbour)."""
    n = features.size(0)
    w = torch.zeros(n, n, device=features.device, dtype=features.dtype)
    if n < 2 or k < 1:
        return w
    dist = torch.cdist(features, features)
    if drop_first:
        idx = dist.topk(min(k + 1, n), dim=1, largest=False).indices[:, 1:]
    else:
        dist.fill_diagonal_(float("inf"))  # a sample is not its own neighbour
        idx = dist.topk(min(k, n - 1), dim=1, largest=False).indices
    w.scatter_(1, idx, 1.0)
    return w


def laplacian_refinement(unary: torch.Tensor, affinity: torch.Tensor, max_steps: int, tol: float) -> tuple[torch.Tensor, int]:
    """Minimise the LAME energy by its fixed-point iteration; returns ``(Y, iterations)``.
    ``unary`` is ``−log p`` (N×K), ``affinity`` the N×N kernel."""
    y = (-unary).softmax(-1)
    previous = float("inf")
    steps = 0
    for step in range(max_steps):
        pairwise = affinity @ y
        y = (pairwise - unary).softmax(-1)
        energy = (unary * y - pairwise * y + y * torch.log(y.clamp_min(1e-20))).sum().item()
        steps = step + 1
        if step > 1 and abs(energy - previous) <= tol * abs(previous):
            break
        previous = energy
    return y, steps


@register
class LAME(TTAMethod):
    name = "lame"
    family = "gradient-free"
    norm_free = True
    paper = "Boudiaf et al., Parameter-free Online Test-time Adaptation, CVPR 2022"
    updates = "nothing (refines each batch's output probabilities)"
    overhead = "intrinsic: kNN affinity + up to 100 fixed-point iterations before the output"
    departures = (
        Departure(
            point="unary term",
            default="−log(p + 1e-10) from the softmax",
            reference="−log_softmax(logits)",
            reason="the LAME authors' formula (the two differ only where p is below about 1e-8)",
        ),
        Departure(
            point="self-exclusion from the neighbours",
            default="the diagonal of the distance matrix is set to +inf before the k nearest are taken",
            reference="the k + 1 nearest are taken and the first dropped",
            reason="the same neighbours unless features coincide, where the reference can keep the sample as its own neighbour",
        ),
    )

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        return {"knn": 5, "max_steps": 100, "tol": 1e-8}

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        check_params(self, non_negative=("tol",), positive_ints=("knn", "max_steps"))
        model.eval()
        model.requires_grad_(False)
        self.head = classifier_head(model, context.model_name or None)
        #: iterations the last refinement took (a diagnostic: LAME's latency varies with it).
        self.last_iterations = 0
        self._finish_setup()

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        captured: list[torch.Tensor] = []
        handle = self.head.register_forward_hook(lambda m, inp, out: captured.append(inp[0]))
        try:
            logits = self.model(x)
        finally:
            handle.remove()
        if self.frozen:
            return logits
        paper = self.paper_profile
        if paper:
            unary = -logits.float().log_softmax(1)  # Tempora reference
        else:
            unary = -torch.log(logits.float().softmax(1) + 1e-10)  # the LAME authors
        features = F.normalize(captured[0].float().flatten(1), p=2, dim=-1)
        affinity = knn_affinity(features, int(self.params["knn"]), drop_first=paper)
        y, self.last_iterations = laplacian_refinement(unary, affinity, int(self.params["max_steps"]), float(self.params["tol"]))
        return torch.log(y.clamp_min(1e-20))
