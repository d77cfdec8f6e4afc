"""SAR: sharpness-aware and reliable entropy minimisation with model recovery.

Niu et al., "Towards Stable Test-Time Adaptation in Dynamic Wild World", ICLR 2023
(arXiv:2302.12400). Per batch, after the prediction:

1. reliable samples: entropy below ``e_margin`` (0.4·ln C); their mean entropy is back-propagated
   and SAM (Foret et al., ICLR 2021) climbs to ``w + ρ·g/‖g‖`` (ρ = 0.05);
2. a second forward pass at the perturbed weights; of the reliable samples, those still below
   the margin give the sharpness-aware loss, whose gradient SGD (lr 0.00025 ResNet / 0.001 ViT,
   momentum 0.9, batch 64) applies at ``w``;
3. model recovery: a moving average (0.9 / 0.1) of that second loss is kept; when it falls below
   ``reset_constant`` (0.2) the model and optimiser go back to the source state.

Only the affine parameters of normalisation layers are adapted, excluding the top of the
network as the authors do: ``layer4`` of a ResNet-50 and blocks 9–11 plus the final norm of a
ViT-B/16. Generalised here as "the last residual stage" (the highest ``layerN``; for a model
whose stages sit in one ``layers``/``stages`` container, its last element — the third and last
stage, ``layers.2``, of the demo ResNet) and "the last quarter of the transformer blocks plus
the final ``norm``".

Where the default differs from the Tempora reference (what ``profile=paper`` restores) and
from the authors' code is listed, with the reason, in the class's generated "Departures"
section. The trace metadata records the options (``profile`` included), the excluded modules
and the number of adapted tensors.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch
import torch.nn as nn

from . import register
from ._sam import SAM
from .base import AS_DEFAULT, Departure, MethodContext, MethodError, entropy_margin, named_norm_affine_params, softmax_entropy
from .gradient import TRACKED_BN_STATISTICS, GradientMethod, auxiliary_view_statistics, reference_top_layer, selected


def sar_excluded_modules(model: nn.Module) -> list[str]:
    """Module-name prefixes SAR leaves unadapted: the top stage of the network."""
    names = dict(model.named_modules())
    excluded: list[str] = []
    # ResNet-like: the highest-numbered ``layerN`` among siblings
    stages: dict[str, list[tuple[int, str]]] = {}
    for name in names:
        last = name.rsplit(".", 1)[-1]
        m = re.fullmatch(r"layer(\d+)", last)
        if m:
            stages.setdefault(name[: len(name) - len(last)], []).append((int(m.group(1)), name))
    if stages:
        _, members = max(stages.items(), key=lambda kv: len(kv[1]))
        if len(members) > 1:
            excluded.append(max(members)[1])
    else:
        # one container of stages (``layers``/``stages``, one block per stage as in the demo
        # ResNet): its last element is the top stage
        for name, module in names.items():
            if name.split(".")[-1] in ("layers", "stages") and isinstance(module, (nn.Sequential, nn.ModuleList)) and len(module) > 1:
                excluded.append(f"{name}.{len(module) - 1}")
                break
    # ViT-like: the last quarter of ``blocks`` and the final ``norm`` beside them
    for name, module in names.items():
        if name.split(".")[-1] == "blocks" and isinstance(module, (nn.Sequential, nn.ModuleList)) and len(module) >= 4:
            n = len(module)
            excluded += [f"{name}.{i}" for i in range(n - n // 4, n)]
            parent = name[: -len("blocks")]
            if f"{parent}norm" in names:
                excluded.append(f"{parent}norm")
    return excluded


def _is_within(name: str, prefixes: list[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@register
class SAR(GradientMethod):
    """SAR. Choice of defaults (see Departures): a batch with nothing to learn from costs
    nothing and moves nothing, and a reset returns the optimiser to its source state, so that
    "reset" means the same thing for every method in the tracer."""

    name = "sar"
    compatible_norms = frozenset({"bn", "gn", "ln"})
    paper = "Niu et al., Towards Stable Test-Time Adaptation in Dynamic Wild World (SAR), ICLR 2023"
    updates = "affine parameters of normalisation layers outside the last stage"
    overhead = "extrinsic: two backward passes and a second forward (SAM) after the prediction"
    non_negative_options = ("lr", "rho", "e_margin", "reset_constant")
    fraction_options = ("momentum", "loss_ema", "bn_momentum")
    departures = (
        Departure(
            point="top layers left unadapted",
            default="the last residual stage (the highest layerN, or the last element of a "
            "layers/stages container) and the last quarter of the transformer blocks "
            "plus the final norm",
            reference="modules named layer4, blocks.9-11 or norm: the same set on ResNet-50 and "
            "ViT-B/16, nothing on models named otherwise (the demo ResNets)",
            reason="the authors' intent (leave the top of the network alone) on any architecture",
        ),
        auxiliary_view_statistics("second (perturbed) forward"),
        Departure(
            point="no reliable sample (first or second filter empty)",
            default="no step: the perturbation is undone (second filter) or never made (first), nothing moves",
            reference="both passes still run on a NaN loss (the mean of an empty selection); its "
            "zero gradients leave SGD a momentum-only step",
            authors="as the reference",
            reason="a batch without a reliable sample carries no learning signal; stepping along "
            "stale momentum moves the weights anyway and costs two passes",
        ),
        Departure(
            point="SGD momentum through a reset (model recovery and the episode reset)",
            default="restored with the model: the optimiser returns to its source state",
            reference="kept: its SAM wrapper's load_state_dict restores only the wrapper's own "
            "state, so the inner SGD's momentum buffers survive",
            authors="as the reference (same SAM wrapper)",
            reason="a reset should return to the source state; leftover momentum pushes the "
            "recovered model straight back where it collapsed",
        ),
        Departure(
            point="loss average after a model recovery",
            default="cleared",
            reference=AS_DEFAULT,
            authors="overwritten with the pre-recovery value right after the reset, so a recovery "
            "repeats on every batch until the average climbs back above the threshold",
            reason="the recovery is meant to start the average afresh",
        ),
        TRACKED_BN_STATISTICS,
    )

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        return {
            **super().default_params(context),
            "rho": 0.05,
            "e_margin": entropy_margin(context.num_classes, 0.4),
            "reset_constant": 0.2,
            "loss_ema": 0.9,
        }

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        #: moving average of the sharpness-aware loss (None until the first value, and after a recovery).
        self.loss_average: float | None = None
        #: model recoveries so far and whether the last batch triggered one (diagnostics, not state).
        self.recoveries = 0
        self.last_recovered = False
        self.last_loss: float | None = None

    def choose_parameters(self, model: nn.Module) -> list[tuple[str, nn.Parameter]]:
        if self.paper_profile:
            # Tempora reference: its literal names (layer4, blocks.9-11, norm), as DeYO uses them.
            self.excluded = [
                mn
                for mn, m in model.named_modules()
                if mn
                and reference_top_layer(mn)
                and not reference_top_layer(mn.rpartition(".")[0])
                and next(m.parameters(), None) is not None
            ]
            adapted = named_norm_affine_params(model, skip=reference_top_layer)
        else:
            self.excluded = sar_excluded_modules(model)
            adapted = named_norm_affine_params(model, skip=lambda mn: _is_within(mn, self.excluded))
        if not adapted:
            raise MethodError("method 'sar' found no normalisation parameters outside the model's last stage to adapt")
        return adapted

    def build_optimizer(self, params: list[nn.Parameter]) -> SAM:  # type: ignore[override]
        return SAM(super().build_optimizer(params), rho=self.params["rho"])

    def hparams(self) -> dict[str, Any]:
        return {**super().hparams(), "excluded_modules": list(self.excluded), "adapted_tensors": len(self.adapted)}

    def update(self, x: torch.Tensor, logits: torch.Tensor) -> bool:
        sam: SAM = self.optimizer  # type: ignore[assignment]
        paper = self.paper_profile
        self.last_recovered = False
        self.last_loss = None
        margin = self.params["e_margin"]
        sam.zero_grad()
        entropy = softmax_entropy(logits)
        reliable = selected(entropy < margin)
        if not paper and reliable.numel() == 0:
            return False
        # profile=paper, Tempora reference quirk: with no reliable sample this is the NaN mean of
        # an empty selection; its backward gives zero gradients and both passes still run.
        entropy.index_select(0, reliable).mean(0).backward()
        sam.first_step()
        entropy2 = softmax_entropy(self.auxiliary_forward(x)).index_select(0, reliable)
        still_reliable = selected(entropy2 < margin)
        if not paper and still_reliable.numel() == 0:
            sam.undo_perturbation()
            sam.zero_grad()
            return False
        loss = entropy2.index_select(0, still_reliable).mean(0)
        value = loss.item()
        self.last_loss = value
        if not math.isnan(value):
            a = self.params["loss_ema"]
            self.loss_average = value if self.loss_average is None else a * self.loss_average + (1 - a) * value
        # profile=paper on an empty second filter: zero gradients, so SGD takes a momentum-only step.
        loss.backward()
        sam.second_step()
        if self.loss_average is not None and self.loss_average < self.params["reset_constant"]:
            self._recover()
        return True

    def _inner_momentum(self) -> dict[Any, Any]:
        return dict(self.optimizer.base.state)  # type: ignore[union-attr]

    def _reinstate_momentum(self, saved: dict[Any, Any]) -> None:
        # profile=paper, Tempora reference quirk: the inner SGD's momentum survives a reset.
        self.optimizer.base.state.update(saved)  # type: ignore[union-attr]

    def reset(self) -> None:
        saved = self._inner_momentum() if self.paper_profile else None
        super().reset()
        if saved is not None:
            self._reinstate_momentum(saved)

    def _recover(self) -> None:
        """Model recovery: parameters, optimiser and loss average back to the source state."""
        assert self._initial_state is not None
        saved = self._inner_momentum() if self.paper_profile else None
        self.restore(self._initial_state)
        if saved is not None:
            self._reinstate_momentum(saved)
        self.recoveries += 1
        self.last_recovered = True

    def extra_state(self) -> dict[str, Any]:
        return {"loss_average": self.loss_average}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.loss_average = state["loss_average"]
