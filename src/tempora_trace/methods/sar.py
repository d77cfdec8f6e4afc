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

Deviations, all documented in the trace metadata: the second (perturbed) forward does not move
the tracked BatchNorm buffers (only the clean stream should, docs/design.md §5); when a filter leaves no
sample the step is skipped (the authors' code still applies a momentum-only step); a model
recovery also clears the loss average (the authors' code accidentally keeps the old value).
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch
import torch.nn as nn

from . import register
from ._common import GradientMethod, check_params, default_lr, require_norm
from ._sam import SAM
from .base import NORM_TYPES, MethodContext, MethodError, configure_batchnorm, entropy_margin, no_stat_tracking, softmax_entropy


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
    name = "sar"
    compatible_norms = frozenset({"bn", "gn", "ln"})
    paper = "Niu et al., Towards Stable Test-Time Adaptation in Dynamic Wild World (SAR), ICLR 2023"
    updates = "affine parameters of normalisation layers outside the last stage"
    overhead = "extrinsic: two backward passes and a second forward (SAM) after the prediction"

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        return {
            "lr": default_lr(context),
            "momentum": 0.9,
            "rho": 0.05,
            "e_margin": entropy_margin(context.num_classes, 0.4),
            "reset_constant": 0.2,
            "loss_ema": 0.9,
            "source_stats": "discard",
            "bn_momentum": 0.1,
        }

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        check_params(self, non_negative=("lr", "rho", "e_margin", "reset_constant"), fractions=("momentum", "loss_ema", "bn_momentum"))
        require_norm(self, model)
        model.eval()
        self.set_train_modules(configure_batchnorm(model, self.params["source_stats"], self.params["bn_momentum"]))
        self.excluded = sar_excluded_modules(model)
        self.adapted = [
            (f"{mn}.{pn}", p)
            for mn, m in model.named_modules()
            if isinstance(m, NORM_TYPES) and not _is_within(mn, self.excluded)
            for pn, p in m.named_parameters(recurse=False)
            if pn in ("weight", "bias")
        ]
        if not self.adapted:
            raise MethodError("method 'sar' found no normalisation parameters outside the model's last stage to adapt")
        self.optimizer = SAM(self._build_sgd([p for _, p in self.adapted]), rho=self.params["rho"])  # type: ignore[assignment]
        #: moving average of the sharpness-aware loss (None until the first value, and after a recovery).
        self.loss_average: float | None = None
        #: model recoveries so far and whether the last batch triggered one (diagnostics, not state).
        self.recoveries = 0
        self.last_recovered = False
        self.last_loss: float | None = None
        self._finish_setup()

    def hparams(self) -> dict[str, Any]:
        return {**super().hparams(), "excluded_modules": list(self.excluded), "adapted_tensors": len(self.adapted)}

    def _update(self, x: torch.Tensor, logits: torch.Tensor) -> bool:
        sam: SAM = self.optimizer  # type: ignore[assignment]
        self.last_recovered = False
        self.last_loss = None
        margin = self.params["e_margin"]
        sam.zero_grad()
        entropy = softmax_entropy(logits)
        reliable = entropy < margin
        if not bool(reliable.any()):
            return False
        entropy[reliable].mean(0).backward()
        sam.first_step()
        with no_stat_tracking(self.model):
            entropy2 = softmax_entropy(self.model(x))[reliable]
        still_reliable = entropy2 < margin
        if not bool(still_reliable.any()):
            sam.undo_perturbation()
            sam.zero_grad()
            return False
        loss = entropy2[still_reliable].mean(0)
        value = loss.item()
        self.last_loss = value
        if not math.isnan(value):
            a = self.params["loss_ema"]
            self.loss_average = value if self.loss_average is None else a * self.loss_average + (1 - a) * value
        loss.backward()
        sam.second_step()
        if self.loss_average is not None and self.loss_average < self.params["reset_constant"]:
            self._recover()
        return True

    def _recover(self) -> None:
        """Model recovery: parameters, optimiser and loss average back to the source state."""
        assert self._initial_state is not None
        self.restore(self._initial_state)
        self.recoveries += 1
        self.last_recovered = True

    def extra_state(self) -> dict[str, Any]:
        return {"loss_average": self.loss_average}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.loss_average = state["loss_average"]
