"""Pseudo-Label (Lee, 2013) as a test-time adaptation method.

Each batch, the model's own arg-max is taken as the label of every confident sample and one
SGD step of cross-entropy towards it adapts the affine parameters of the normalisation
layers. Test-time pseudo-labelling on these parameters is the "PL" baseline Tent compares
against (Wang et al., Tent: Fully Test-Time Adaptation by Entropy Minimization, ICLR 2021,
§4). Confidence here is the entropy margin 0.4·ln C that EATA (Niu et al., ICML 2022) uses to
keep reliable samples: a documented choice of this example, not Lee's (who labels every
sample); ``e_margin`` sets it, ``e_margin`` = ln C or more keeps every sample.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tempora_trace.methods import GradientMethod, MethodContext, entropy_margin, softmax_entropy


class PseudoLabel(GradientMethod):
    """Cross-entropy towards the model's own arg-max on samples below an entropy margin."""

    name = "pseudo-label"
    paper = "Lee, Pseudo-Label: The Simple and Efficient Semi-Supervised Learning Method for Deep Neural Networks (ICML-W 2013)"
    updates = "normalisation affine parameters (SGD)"
    overhead = "extrinsic: backward and SGD step after the prediction"
    non_negative_options = ("lr", "e_margin")

    @classmethod
    def default_params(cls, context: MethodContext) -> dict:
        return {**super().default_params(context), "e_margin": entropy_margin(context.num_classes, 0.4)}

    def loss(self, x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor | None:
        confident = softmax_entropy(logits) < self.params["e_margin"]
        if not bool(confident.any()):
            return None  # nothing to learn from this batch: no step
        return F.cross_entropy(logits[confident], logits[confident].argmax(1))
