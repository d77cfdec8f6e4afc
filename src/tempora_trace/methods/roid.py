"""ROID: self-training with diversity and certainty weighting, weight ensembling and prior correction.

Marsden, Döbler & Yang, "Universal Test-time Adaptation through Weight Ensembling, Diversity
Weighting, and Prior Correction", WACV 2024. Defaults follow the authors' code and published
configurations. Per batch:

1. the prediction is the adapted model's forward on the batch (BatchNorm on batch statistics),
   multiplied, logit by logit, by the smoothed batch class prior: prior = mean softmax of the
   batch, smooth = max(1/B, 1/C) / max(prior), logits · (prior + smooth) / (1 + smooth·C);
2. weights (no gradient): diversity = 1 − cos(EMA of class probabilities, p), certainty = −H(p),
   each min-max normalised over the batch; samples below the mean diversity are dropped; the
   others get w = exp(diversity · certainty / T) with T = 1/3; the EMA of class probabilities
   moves to 0.9 · EMA + 0.1 · (mean softmax of the batch), starting from uniform;
3. loss = Σ w · SLR(p) + Σ w · SCE(clean, augmented) over the kept samples, divided by the
   configured batch size. SLR is the soft likelihood ratio −Σ_c p_c · log(p_c / (1 − p_c) + 1e-5)
   with p clipped at 0.99; SCE is the symmetric cross-entropy (½ each way) between the clean
   logits and those of one augmented view of the kept samples (the authors' view: colour jitter
   with gamma in random order, reflect padding, random affine, centre crop, horizontal flip;
   one draw per batch);
4. one optimiser step on the affine parameters of every normalisation layer: Adam (lr 0.001,
   β = (0.9, 0.999)) on CIFAR, the demo set included; SGD (lr 0.00025, momentum 0.9, Nesterov)
   on ImageNet, for every architecture; no weight decay;
5. weight ensembling: each adapted parameter θ ← α·θ + (1 − α)·θ_source with α = 0.99.

Time split. ``e`` (``predict``): the forward pass, keeping its graph, and the prior correction
of its logits, which uses nothing but that forward. ``ℓ`` (``adapt``): the weights and the EMA of
class probabilities, the SLR loss, the augmentation and the second forward of the kept samples,
the SCE, backward, optimiser step and weight ensembling. In the authors' code the correction is
applied after the step, but to the logits of the forward before it, so the prediction is the same.

Frozen mode predicts with the adapted parameters on eval-mode BatchNorm without the prior
correction (a batch-level transduction, like batch statistics). The Tempora reference has no
ROID, so ``profile=paper`` changes nothing. The switches ``weighting``, ``prior_correction`` and
``consistency`` are the authors' ablation switches.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import register
from .augment import MethodRNG, cmf_augment
from .base import Departure, MethodContext, MethodError, named_norm_affine_params, no_stat_tracking
from .cmf import prior_corrected, soft_likelihood_ratio, symmetric_cross_entropy
from .gradient import TRACKED_BN_STATISTICS, GradientMethod

OPTIMIZERS = ("adam", "sgd")


def roid_weights(logits: torch.Tensor, class_probs_ema: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample weights and the mask of kept samples: diversity (cosine distance to the EMA
    of class probabilities) and certainty (negative entropy), each min-max normalised; samples
    below the mean diversity get weight 0; ``w = exp(div · cert / T)``. A constant score (one
    sample, identical predictions) normalises to 0 instead of 0/0."""
    probs = logits.softmax(1)
    div = 1.0 - F.cosine_similarity(class_probs_ema.unsqueeze(0), probs, dim=1)
    div = (div - div.min()) / (div.max() - div.min()).clamp_min(1e-12)
    keep = div >= div.mean()
    cert = (probs * logits.log_softmax(1)).sum(1)
    cert = (cert - cert.min()) / (cert.max() - cert.min()).clamp_min(1e-12)
    return torch.exp(div * cert / temperature) * keep, keep


@register
class ROID(GradientMethod):
    """ROID (Marsden, Döbler & Yang, WACV 2024): weighted SLR self-training with a consistency
    term, weight ensembling with the source after every step, and prior correction of the
    prediction. ``e``: forward + prior correction; ``ℓ``: weights, losses, augmented forward,
    backward, step, ensembling (module docstring)."""

    name = "roid"
    family = "gradient-based"
    compatible_norms = frozenset({"bn", "gn", "ln"})
    paper = "Marsden, Döbler & Yang, Universal Test-time Adaptation through Weight Ensembling, Diversity Weighting, and Prior Correction (ROID), WACV 2024"
    updates = "normalisation affine parameters (Adam on CIFAR, SGD on ImageNet), ensembled with the source after each step"
    overhead = "intrinsic: prior correction; extrinsic: weights, augmented second forward, backward, step, weight ensembling"
    non_negative_options = ("lr", "weight_decay")
    fraction_options = ("momentum", "beta1", "beta2", "momentum_src", "momentum_probs", "slr_clip", "sce_alpha", "bn_momentum")
    departures = (
        Departure(
            point="constant diversity or certainty score in a batch (one sample, identical predictions)",
            default="that score normalises to 0, so every kept sample gets weight exp(0) = 1",
            reference="as default",
            authors="min-max normalisation divides 0 by 0: NaN weights, a NaN loss, and NaN parameters from then on",
            reason="one degenerate batch should not end the stream",
        ),
        Departure(
            point="weighting off, consistency on",
            default="every sample kept with weight 1 in both losses",
            reference="as default",
            authors="fails (the consistency term reads the weights and mask that only weighting defines)",
            reason="the ablation should run",
        ),
        Departure(
            point="BatchNorm buffers during the augmented forward",
            default="left alone (train-mode BN uses the view's batch statistics, the running buffers do not move)",
            reference="as default",
            authors="nothing to move (running statistics are not tracked)",
            reason="the buffers frozen inference uses should describe the clean target stream",
        ),
        TRACKED_BN_STATISTICS,
    )

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        """The authors' published configurations: Adam at lr 0.001 on CIFAR (cifar10_c and
        cifar100_c), SGD at lr 0.00025 with Nesterov momentum on ImageNet (imagenet_c, ccc,
        imagenet_others, domainnet126); ROID's own options as in their config defaults."""
        cifar = context.dataset_family == "cifar"
        return {
            "optimizer": "adam" if cifar else "sgd",
            "lr": 0.001 if cifar else 0.00025,
            "momentum": 0.9,  # SGD
            "nesterov": True,  # SGD
            "beta1": 0.9,  # Adam
            "beta2": 0.999,  # Adam
            "weight_decay": 0.0,
            "momentum_src": 0.99,
            "momentum_probs": 0.9,
            "temperature": 1.0 / 3.0,
            "slr_clip": 0.99,
            "sce_alpha": 0.5,
            "weighting": True,
            "prior_correction": True,
            "consistency": True,
            "source_stats": "discard",
            "bn_momentum": 0.1,
        }

    def validate(self) -> None:
        p = self.params
        if p["optimizer"] not in OPTIMIZERS:
            raise MethodError(f"method 'roid': option optimizer must be one of {', '.join(OPTIMIZERS)}, not {p['optimizer']!r}")
        if p["temperature"] <= 0.0 or p["slr_clip"] >= 1.0 or p["beta2"] >= 1.0:
            raise MethodError("method 'roid': options slr_clip and beta2 must be < 1 and temperature > 0")
        if p["optimizer"] == "sgd" and p["nesterov"] and p["momentum"] <= 0.0:
            raise MethodError("method 'roid': Nesterov SGD needs momentum > 0 (or nesterov=false)")

    def choose_parameters(self, model: nn.Module) -> list[tuple[str, nn.Parameter]]:
        return named_norm_affine_params(model)

    def build_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        p = self.params
        if p["optimizer"] == "adam":
            return torch.optim.Adam(params, lr=p["lr"], betas=(p["beta1"], p["beta2"]), weight_decay=p["weight_decay"], foreach=True)
        return torch.optim.SGD(
            params, lr=p["lr"], momentum=p["momentum"], dampening=0.0, weight_decay=p["weight_decay"], nesterov=p["nesterov"], foreach=True
        )

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        self.trainable = [p for _, p in self.adapted]
        #: the source values of the adapted parameters (the weight-ensembling anchor).
        self.source = [p.detach().clone() for p in self.trainable]
        self.class_probs_ema = torch.full((context.num_classes,), 1.0 / context.num_classes, device=self.trainable[0].device)
        self.rng = MethodRNG()
        #: samples that entered the loss on the last adapted batch.
        self.last_selected = 0

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        out = super().predict(x)  # the adapted model's forward; its graph is kept for adapt
        if self.frozen or not self.params["prior_correction"]:
            return out
        return prior_corrected(out)

    def auxiliary_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The augmented view's forward; it never moves the tracked BatchNorm statistics."""
        if not self.bn_layers:
            return self.model(x)
        with no_stat_tracking(self.bn_layers):
            return self.model(x)

    def _view(self, x: torch.Tensor) -> torch.Tensor:
        return cmf_augment(x, self.rng.get("cpu"))

    def warm_up_shapes(self, x: torch.Tensor) -> None:
        # the augmented view's forward and backward run on the kept samples only
        if self.params["consistency"]:
            self.warm_auxiliary_sizes(x, self._view, backward=True)

    def update(self, x: torch.Tensor, logits: torch.Tensor) -> bool:
        p = self.params
        if p["weighting"]:
            with torch.no_grad():
                detached = logits.detach()
                weights, keep = roid_weights(detached, self.class_probs_ema, p["temperature"])
                m = p["momentum_probs"]
                self.class_probs_ema = m * self.class_probs_ema + (1 - m) * detached.softmax(1).mean(0)
            idx = keep.nonzero().squeeze(1)  # one host synchronisation: the view's size depends on it
            weights = weights.index_select(0, idx)
            kept = logits.index_select(0, idx)
        else:
            idx = None
            kept = logits
            weights = torch.ones(logits.shape[0], device=logits.device, dtype=logits.dtype)
        self.last_selected = n = int(kept.shape[0])
        if n == 0:
            return False
        denom = float(self.context.batch_size)  # the configured batch size, as the authors divide
        loss = (soft_likelihood_ratio(kept, p["slr_clip"]) * weights).sum() / denom
        if p["consistency"]:
            x_kept = x.detach() if idx is None else x.detach().index_select(0, idx)
            logits_aug = self.auxiliary_forward(self._view(x_kept))
            loss = loss + (symmetric_cross_entropy(logits_aug, kept, p["sce_alpha"]) * weights).sum() / denom
        self._step(loss)
        self._ensemble()
        return True

    @torch.no_grad()
    def _ensemble(self) -> None:
        """Weight ensembling: θ ← α·θ + (1 − α)·θ_source for every adapted parameter."""
        alpha = float(self.params["momentum_src"])
        if alpha >= 1.0:
            return
        params = [q.detach() for q in self.trainable]
        torch._foreach_mul_(params, alpha)
        torch._foreach_add_(params, torch._foreach_mul(self.source, 1.0 - alpha))

    def extra_state(self) -> dict[str, Any]:
        return {"class_probs_ema": self.class_probs_ema.clone(), "rng": self.rng.state()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.class_probs_ema = state["class_probs_ema"].clone()
        self.rng.load(state["rng"])


__all__ = ["ROID", "roid_weights"]
