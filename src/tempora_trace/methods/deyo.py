"""DeYO: entropy minimisation on samples that are confident *and* shape-grounded.

Lee, J., Jung, D., Lee, S., Park, J., Shin, J., Hwang, U. and Yoon, S. "Entropy is not Enough
for Test-Time Adaptation: From the Perspective of Disentangled Factors." ICLR 2024.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from . import register
from .augment import MethodRNG, patch_shuffle
from .base import MethodContext, MethodError, entropy_margin, named_norm_affine_params, softmax_entropy
from .gradient import TRACKED_BN_STATISTICS, GradientMethod, auxiliary_view_statistics, reference_top_layer, selected

#: DeYO leaves the top of the network untouched, as the authors' code does: ResNet ``layer4``,
#: ViT-B blocks 9–11 and the final ``norm``. Matched on whole name components so the rule also
#: holds inside wrappers (e.g. the tracer's ``Normalized``: ``net.blocks.9``, ``net.norm``).
_skipped = reference_top_layer


def deyo_params(model: nn.Module) -> list[nn.Parameter]:
    """Affine parameters of the normalisation layers outside the skipped top layers."""
    return [p for _, p in named_norm_affine_params(model, skip=_skipped)]


@register
class DeYO(GradientMethod):
    """DeYO (Lee et al., ICLR 2024): Tent-style entropy minimisation of the norm-layer affine
    parameters on samples that pass two filters: low entropy (< 0.5·ln C) and a large PLPD
    (Pseudo-Label Probability Difference > 0.2): the drop of the predicted class's probability
    when the image's 4 × 4 patch grid is shuffled, which needs a second, no-gradient forward.
    Survivors are weighted by ``exp(0.4·ln C − H) + exp(PLPD)``.

    Prediction boundary: the gradient-carrying forward is ``predict`` (its logits are the
    prediction); the patch shuffle, the second forward, both filters, the backward and the SGD
    step are ``adapt``. BatchNorm runs on batch statistics; by default the source running
    statistics are discarded (authors' behaviour) and target statistics are tracked for frozen
    mode; by default the shuffled forward does not move them. Works on BN, GN and LN models (the paper runs
    it on ResNet-50 and ViT-B/16). ``patch_len`` is the number of patches per side, so the
    authors' 4 serves 32×32 inputs as well as 224×224 (8×8-pixel patches on the demo set).
    """

    name = "deyo"
    family = "gradient-based"
    compatible_norms = frozenset({"bn", "gn", "ln"})
    paper = "Lee et al., Entropy is not Enough for Test-Time Adaptation (DeYO), ICLR 2024"
    updates = "norm-layer affine parameters (except ResNet layer4 / ViT blocks 9-11)"
    overhead = "adapt: patch-shuffled no-grad second forward on entropy-filtered samples, backward, SGD step"

    non_negative_options = ("lr", "momentum", "ent_threshold", "ent_margin")
    fraction_options = ("bn_momentum",)
    positive_int_options = ("patch_len",)
    departures = (auxiliary_view_statistics("patch-shuffled forward"), TRACKED_BN_STATISTICS)

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        return {
            **super().default_params(context),  # authors: lr 0.00025 for ResNets, 0.001 for ViT-B (batch 64)
            "ent_threshold": entropy_margin(context.num_classes, 0.5),  # τ_Ent = 0.5·ln C
            "ent_margin": entropy_margin(context.num_classes, 0.4),  # Ent_0 = 0.4·ln C
            "plpd_threshold": 0.2,
            "patch_len": 4,
        }

    def validate(self) -> None:
        if self.params["patch_len"] < 2:
            raise MethodError(f"deyo: patch_len must be at least 2, not {self.params['patch_len']}")

    def choose_parameters(self, model: nn.Module) -> list[tuple[str, nn.Parameter]]:
        params = named_norm_affine_params(model, skip=_skipped)
        if not params:
            raise MethodError("deyo needs normalisation layers with affine parameters below the top layers")
        return params

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        self.rng = MethodRNG()
        #: samples kept by the entropy filter and then by the PLPD filter on the last batch.
        self.last_counts = (0, 0)

    def warm_up_shapes(self, x: torch.Tensor) -> None:
        # the shuffled view's forward runs on the entropy-filtered samples only
        patch = int(self.params["patch_len"])
        self.warm_auxiliary_sizes(x, lambda v: patch_shuffle(v, patch, self.rng.get(v.device)), backward=False)

    def update(self, x: torch.Tensor, logits: torch.Tensor) -> bool:
        p = self.params
        entropy = softmax_entropy(logits)
        keep = selected(entropy < p["ent_threshold"])
        self.last_counts = (int(keep.numel()), 0)
        if keep.numel() == 0:
            return False
        entropy, kept_logits = entropy.index_select(0, keep), logits.index_select(0, keep)
        # the second, no-gradient forward on patch-shuffled copies (by default BN normalises
        # with the shuffled subset's batch statistics and the tracked buffers do not move)
        shuffled = patch_shuffle(x.detach().index_select(0, keep), int(p["patch_len"]), self.rng.get(x.device))
        with torch.no_grad():
            prob_shuffled = self.auxiliary_forward(shuffled).softmax(1)
        prob = kept_logits.detach().softmax(1)
        cls = prob.argmax(1, keepdim=True)
        plpd = (prob.gather(1, cls) - prob_shuffled.gather(1, cls)).squeeze(1)
        grounded = selected(plpd > p["plpd_threshold"])
        self.last_counts = (self.last_counts[0], int(grounded.numel()))
        if grounded.numel() == 0:
            return False
        entropy, plpd = entropy.index_select(0, grounded), plpd.index_select(0, grounded)
        weight = torch.exp(p["ent_margin"] - entropy.detach()) + torch.exp(plpd)
        self._step((entropy * weight).mean())
        return True

    def extra_state(self) -> dict[str, Any]:
        return {"rng": self.rng.state()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.rng.load(state["rng"])


__all__ = ["DeYO", "deyo_params"]
