"""Tent: fully test-time adaptation by entropy minimisation.

Wang, Shelhamer, Liu, Olshausen & Darrell, "Tent: Fully Test-Time Adaptation by Entropy
Minimization", ICLR 2021. Predict-then-adapt: the prediction is the forward pass on the
batch (train-mode normalisation, batch statistics); afterwards one SGD step (momentum 0.9)
on the mean softmax entropy updates only the affine parameters of the normalisation layers.
Learning rate 0.00025 (the paper's ImageNet setting at batch 64; the Tempora reference uses it
for every dataset and batch size) and 0.001 for ViT-B/16, as in the Tempora reference.
BatchNorm running statistics are reset (``source_stats='discard'``) and tracked over the target
stream with momentum 0.1 so frozen inference has valid buffers (docs/design/design.md §5).
"""

from __future__ import annotations

import torch

from . import register
from .base import softmax_entropy
from .gradient import TRACKED_BN_STATISTICS, GradientMethod


@register
class Tent(GradientMethod):
    """Entropy minimisation on normalisation affine parameters."""

    name = "tent"
    paper = "Wang et al., Tent: Fully Test-Time Adaptation by Entropy Minimization (ICLR 2021)"
    updates = "normalisation affine parameters (SGD)"
    overhead = "extrinsic (backward + step)"
    departures = (TRACKED_BN_STATISTICS,)

    def loss(self, x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        # Predict-then-adapt: the entropy of the very forward that produced the prediction.
        return softmax_entropy(logits).mean()
