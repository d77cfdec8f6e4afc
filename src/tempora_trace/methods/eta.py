"""ETA: Tent with reliability and redundancy sample filters and entropy re-weighting.

Niu et al., "Efficient Test-Time Model Adaptation without Forgetting", ICML 2022
(arXiv:2204.02610); ETA is EATA without the Fisher anti-forgetting term. Per batch:

1. reliability: keep samples whose prediction entropy is below ``e_margin`` (0.4·ln C);
2. redundancy: of those, keep samples whose softmax is not too similar (|cos| < ``d_margin``)
   to a moving average of the probabilities of previously selected samples; the first batch
   with reliable samples only initialises that average (all its reliable samples are kept);
3. the moving average becomes 0.9·average + 0.1·mean(selected probabilities);
4. minimise the mean of ``entropy · exp(e_margin − entropy)`` over the selected samples with
   SGD (lr 0.00025, momentum 0.9 at batch 64) on the affine parameters of every normalisation
   layer; no step when the filters leave nothing.

The filters do not change the prediction, so everything after the forward pass is ``adapt``.
BatchNorm normalises with batch statistics; by default (the authors' code) source running
statistics are discarded and target statistics are tracked for frozen mode (docs/design/design.md §5);
``source_stats="keep"`` is the Table 16 ablation, registered as ``eta-no-reset``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import register
from .base import MethodContext, entropy_margin, softmax_entropy
from .gradient import TRACKED_BN_STATISTICS, GradientMethod, selected


def redundancy_margin(context: MethodContext) -> float:
    """EATA's cosine-similarity margin ε: 0.05 on ImageNet, 0.4 on CIFAR-10, 0.1 on CIFAR-100."""
    if context.dataset_family == "cifar":
        return 0.4 if context.num_classes <= 10 else 0.1
    return 0.05


@register
class ETA(GradientMethod):
    name = "eta"
    compatible_norms = frozenset({"bn", "gn", "ln"})
    paper = "Niu et al., Efficient Test-Time Model Adaptation without Forgetting (EATA/ETA), ICML 2022"
    updates = "affine parameters of all normalisation layers"
    overhead = "extrinsic: entropy filters, backward pass and SGD step after the prediction"
    #: source BatchNorm statistics: ``discard`` in the authors' code.
    default_source_stats = "discard"

    non_negative_options = ("lr", "e_margin", "d_margin")
    fraction_options = ("momentum", "probs_momentum", "bn_momentum")
    departures = (TRACKED_BN_STATISTICS,)

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        return {
            **super().default_params(context),
            "e_margin": entropy_margin(context.num_classes, 0.4),
            "d_margin": redundancy_margin(context),
            "probs_momentum": 0.9,
        }

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        #: moving average of the selected samples' probabilities (None until the first one).
        self.mean_probs: torch.Tensor | None = None
        self.num_reliable = 0  # samples that passed the reliability filter so far
        self.num_selected = 0  # ... and the redundancy filter (the ones that were learnt from)
        #: how many samples each filter kept on the last batch (diagnostics and tests).
        self.last_kept: tuple[int, int] = (0, 0)

    def update(self, x: torch.Tensor, logits: torch.Tensor) -> bool:
        entropy = softmax_entropy(logits)
        reliable = selected(entropy < self.params["e_margin"])
        entropy, logits = entropy.index_select(0, reliable), logits.index_select(0, reliable)
        probs = logits.detach().softmax(1)
        if self.mean_probs is not None and probs.size(0) > 0:
            cos = F.cosine_similarity(self.mean_probs.unsqueeze(0), probs, dim=1)
            novel = selected(cos.abs() < self.params["d_margin"])
            entropy, probs = entropy.index_select(0, novel), probs.index_select(0, novel)
        n_reliable, n_selected = int(reliable.numel()), int(entropy.size(0))
        self.last_kept = (n_reliable, n_selected)
        self.num_reliable += n_reliable
        self.num_selected += n_selected
        if n_selected == 0:
            return False
        batch_mean = probs.mean(0)
        if self.mean_probs is None:
            self.mean_probs = batch_mean
        else:
            a = self.params["probs_momentum"]
            self.mean_probs = a * self.mean_probs + (1 - a) * batch_mean
        weight = torch.exp(self.params["e_margin"] - entropy.detach())
        self._step((entropy * weight).mean(0))
        return True

    def extra_state(self) -> dict[str, Any]:
        return {
            "mean_probs": None if self.mean_probs is None else self.mean_probs.clone(),
            "num_reliable": self.num_reliable,
            "num_selected": self.num_selected,
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.mean_probs = state["mean_probs"]
        self.num_reliable = state["num_reliable"]
        self.num_selected = state["num_selected"]
