"""SHOT-IM* (``shot-norm``): the SHOT-IM loss on normalisation-layer affine parameters only,
with source BatchNorm statistics discarded.

The Tempora paper's Table 16 ablation (ICML 2026, Appendix C.3) of Liang et al., ICML 2020:
it gives SHOT-IM the parameterisation and BN handling of the Tent family (ETA, SAR, ...) to
show that SHOT-IM's survival of frozen inference comes from keeping source statistics, not
from its loss.
"""

from __future__ import annotations

import torch.nn as nn

from . import register
from .base import named_norm_affine_params
from .gradient import TRACKED_BN_STATISTICS
from .shot_im import SHOTIM


@register
class SHOTNorm(SHOTIM):
    name = "shot-norm"
    compatible_norms = frozenset({"bn"})
    paper = "Tempora (ICML 2026) Table 16 ablation of SHOT-IM (Liang et al., ICML 2020): norm layers only, source BN statistics reset"
    updates = "affine parameters of all normalisation layers"
    overhead = "extrinsic: backward pass and SGD step after the prediction"
    default_source_stats = "discard"

    departures = (SHOTIM.departures[1], TRACKED_BN_STATISTICS)

    def choose_parameters(self, model: nn.Module) -> list[tuple[str, nn.Parameter]]:
        return named_norm_affine_params(model)
