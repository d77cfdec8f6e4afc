"""CMF: continual momentum filtering, a Kalman filter over the adapted weights.

Lee, J. and Chang, H. "Continual Momentum Filtering on Parameter Space for Online Test-time
Adaptation." ICLR 2024.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import register
from .augment import MethodRNG, cmf_augment, random_resized_crop_flip
from .base import Departure, MethodContext, MethodError, named_norm_affine_params
from .gradient import TRACKED_BN_STATISTICS, GradientMethod, auxiliary_view_statistics, is_vit

#: Log offset of the soft likelihood ratio (the authors' constant).
SLR_EPS = 1e-5


def soft_likelihood_ratio(logits: torch.Tensor, clip: float = 0.99) -> torch.Tensor:
    """Per-sample SLR loss ``−Σ_c p_c · log(p_c / (1 − p_c) + ε)`` with p clipped at ``clip``:
    an entropy surrogate whose gradient does not vanish for confident samples."""
    p = logits.softmax(1).clamp(max=clip)
    return -(p * torch.log(p / (1.0 - p) + SLR_EPS)).sum(1)


def symmetric_cross_entropy(logits_aug: torch.Tensor, logits: torch.Tensor, alpha: float = 0.5) -> torch.Tensor:
    """Per-sample ``−(1−a) Σ p·log q − a Σ q·log p`` between the clean (p) and augmented (q)
    views (a = ½ in the authors' code)."""
    return -(1 - alpha) * (logits.softmax(1) * logits_aug.log_softmax(1)).sum(1) - alpha * (
        logits_aug.softmax(1) * logits.log_softmax(1)
    ).sum(1)


def prior_corrected(logits: torch.Tensor) -> torch.Tensor:
    """Scale the logits by the smoothed batch class prior (the authors' prediction-time
    correction): prior = mean softmax, smooth = max(1/B, 1/C) / max(prior),
    ``logits · (prior + smooth) / (1 + smooth·C)``."""
    b, c = logits.shape
    prior = logits.softmax(1).mean(0)
    smooth = max(1.0 / b, 1.0 / c) / prior.max()
    return logits * ((prior + smooth) / (1.0 + smooth * c))


def kalman_gain(hidden_var: float, alpha: float, q: float) -> tuple[float, float]:
    """One predict/update of CMF's scalar variance: returns ``(beta, new_var)``.

    var ← α²·var + q; β = r / (var + r) with r = 1 − q, floored at 0.89 and saturated to 1
    (no update) at ≥ 0.9999; var ← β·var."""
    var = alpha**2 * hidden_var + q
    r = 1.0 - q
    beta = r / (var + r)
    beta = max(beta, 0.89)
    if beta >= 0.9999:
        beta = 1.0
    return beta, beta * var


@register
class CMF(GradientMethod):
    """CMF (Lee & Chang, ICLR 2024). Each batch: certainty- and diversity-weighted samples
    (entropy and cosine distance to an EMA of class probabilities, min-max normalised,
    ``w = exp(div·cert / T)``, below-mean-diversity samples dropped) contribute the SLR loss plus
    a symmetric cross-entropy between the clean view and one random augmentation; one SGD step
    on the norm-layer affine parameters; then the Kalman step over those parameters: a hidden
    model is pulled towards the frozen source (α = 0.99), updated towards the SGD-adapted model
    with gain β from the accumulated variance (process noise q), and the adapted model is
    blended towards the hidden one (γ = 0.99).

    Prediction boundary: the prediction is the *adapted* model's forward on the batch (before
    this batch's update), scaled by the smoothed batch class prior, as in the authors' code;
    the hidden model never predicts. That forward keeps its graph in ``predict``; the weights,
    the augmented second forward, backward, step and Kalman update are ``adapt``. BatchNorm
    runs on batch statistics (source running statistics discarded by default, target
    statistics tracked for frozen mode). Works on BN, GN and LN models; q and lr follow the
    paper's reference values per architecture family (CNN: q = 0.00025, lr = 0.0002; ViT:
    q = 0.005, lr = 0.00025).

    Choice of defaults (see Departures): the consistency view is the CMF authors' own
    transform; the Kalman filter runs over the parameters CMF adapts, the only ones whose
    hidden value can ever reach the model (the reference also blends every frozen parameter
    with itself: the same predictions at three times the cost of the step on a ViT).

    Cost (no change to the arithmetic): the selected samples are gathered with one index
    (one host synchronisation instead of five), and the Kalman step runs as a handful of
    ``torch._foreach_*`` calls instead of three Python loops over the parameters.
    """

    name = "cmf"
    family = "gradient-based"
    compatible_norms = frozenset({"bn", "gn", "ln"})
    paper = "Lee & Chang, Continual Momentum Filtering on Parameter Space for Online Test-time Adaptation (CMF), ICLR 2024"
    updates = "norm-layer affine parameters + a hidden (Kalman-filtered) copy of them"
    overhead = "adapt: augmented second forward, backward, SGD step, Kalman/ensemble update"
    non_negative_options = ("lr", "momentum")
    fraction_options = ("alpha", "gamma", "q", "momentum_probs", "slr_clip", "sce_alpha", "bn_momentum")
    departures = (
        Departure(
            point="consistency view",
            default="the CMF authors' transform: colour jitter and gamma in random order, "
            "reflect-padded random affine, flip; one draw per batch",
            reference="RandomResizedCrop (scale 0.5-1, antialiased, output 224 px: the input side "
            "on ImageNet, which the paper profile uses on every input size) and a "
            "horizontal flip, drawn per image",
            reason="the view CMF was published and tuned with",
        ),
        Departure(
            point="Kalman filter over parameters",
            default="the adapted (norm-layer) parameters only",
            reference="update_all: the hidden model blends every parameter with the source and "
            "with the adapted model (frozen ones with themselves); only the adapted "
            "ones are blended back, so predictions are the same and the step costs "
            "about 3x as much on a ViT-B/16",
            authors="not compared",
            reason="a frozen parameter's hidden value never reaches the model",
        ),
        Departure(
            point="loss denominator",
            default="the configured batch size",
            reference="the current batch's size (differs on a domain's last, partial batch)",
            reason="the authors' code divides by the configured batch size",
        ),
        auxiliary_view_statistics("augmented forward"),
        TRACKED_BN_STATISTICS,
    )

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        vit = is_vit(context)
        return {
            "lr": 0.00025 if vit else 0.0002,
            "momentum": 0.9,
            "q": 0.005 if vit else 0.00025,
            "alpha": 0.99,
            "gamma": 0.99,
            "momentum_probs": 0.9,
            "temperature": 1.0 / 3.0,
            "slr_clip": 0.99,
            "sce_alpha": 0.5,
            "prior_correction": True,
            "source_stats": "discard",
            "bn_momentum": 0.1,
        }

    def validate(self) -> None:
        p = self.params
        if p["q"] >= 1.0 or p["temperature"] <= 0.0 or p["slr_clip"] >= 1.0:
            raise MethodError("method 'cmf': options q and slr_clip must be < 1 and temperature > 0")

    def choose_parameters(self, model: nn.Module) -> list[tuple[str, nn.Parameter]]:
        params = named_norm_affine_params(model)
        if not params:
            raise MethodError("cmf needs normalisation layers with affine parameters")
        return params

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        self.trainable = [p for _, p in self.adapted]
        if self.paper_profile:
            # Tempora reference (update_all): the source and hidden models hold every parameter.
            filtered = list(model.parameters())
        else:
            filtered = self.trainable
        #: the model parameters the Kalman filter tracks, and where the adapted ones sit among them.
        self._filtered = filtered
        trainable_ids = {id(q) for q in self.trainable}
        self._adapted_slots = [i for i, q in enumerate(filtered) if id(q) in trainable_ids]
        if len({q.dtype for q in filtered}) != 1:
            raise MethodError("cmf needs the filtered parameters to share one dtype")
        # The source and hidden models live in one flat tensor each (per-parameter views on
        # top), so the Kalman stages that touch only them are three operations, not 3 per tensor.
        self._sizes = [q.numel() for q in filtered]
        #: the frozen source values of the filtered parameters (the Kalman prior's mean), flat.
        self.source_flat = self._flatten(filtered)
        #: the hidden model's values of the filtered parameters, flat; ``hidden`` views it.
        self.hidden_flat = self.source_flat.clone()
        self.source = self._views(self.source_flat)
        self.hidden = self._views(self.hidden_flat)
        self.hidden_var = 0.0
        self.class_probs_ema = torch.full((context.num_classes,), 1.0 / context.num_classes, device=self.trainable[0].device)
        self.rng = MethodRNG()
        #: samples that entered the loss on the last adapted batch.
        self.last_selected = 0

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        out = super().predict(x)  # the adapted model's forward, graph kept for adapt
        if self.frozen or not self.params["prior_correction"]:
            return out
        return prior_corrected(out)

    def _sample_weights(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Certainty × diversity weights and the mask of the samples kept."""
        probs = logits.softmax(1)
        div = 1.0 - F.cosine_similarity(self.class_probs_ema.unsqueeze(0), probs, dim=1)
        div = (div - div.min()) / (div.max() - div.min()).clamp_min(1e-12)
        keep = div >= div.mean()
        cert = (probs * logits.log_softmax(1)).sum(1)  # −H(p), reusing the softmax above
        cert = (cert - cert.min()) / (cert.max() - cert.min()).clamp_min(1e-12)
        weights = torch.exp(div * cert / self.params["temperature"]) * keep
        m = self.params["momentum_probs"]
        self.class_probs_ema = m * self.class_probs_ema + (1 - m) * probs.mean(0)
        return weights, keep

    def _view(self, x: torch.Tensor) -> torch.Tensor:
        if self.paper_profile:
            # Tempora reference: RandomResizedCrop(scale 0.5-1) + flip, sampled per image on the host.
            return random_resized_crop_flip(x, self.rng.get("cpu"))
        return cmf_augment(x, self.rng.get("cpu"))

    def warm_up_shapes(self, x: torch.Tensor) -> None:
        # the augmented view's forward and backward run on the selected samples only
        self.warm_auxiliary_sizes(x, self._view, backward=True)

    def update(self, x: torch.Tensor, logits: torch.Tensor) -> bool:
        with torch.no_grad():
            weights, keep = self._sample_weights(logits.detach())
        # One host synchronisation: the augmented view's batch size depends on the selection.
        idx = keep.nonzero().squeeze(1)
        self.last_selected = n = int(idx.numel())
        if n == 0:
            return False
        # Tempora reference: the current batch's size; the authors: the configured one.
        denom = float(x.shape[0] if self.paper_profile else self.context.batch_size)
        loss = (soft_likelihood_ratio(logits, self.params["slr_clip"]) * weights).index_select(0, idx).sum() / denom
        x_aug = self._view(x.detach().index_select(0, idx))
        logits_aug = self.auxiliary_forward(x_aug)
        sce = symmetric_cross_entropy(logits_aug, logits.index_select(0, idx), self.params["sce_alpha"])
        loss = loss + (sce * weights.index_select(0, idx)).sum() / denom
        self._step(loss)
        self._filter()
        return True

    def _flatten(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat([t.detach().reshape(-1) for t in tensors])

    def _views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        return [v.view_as(q) for v, q in zip(flat.split(self._sizes), self._filtered)]

    @torch.no_grad()
    def _filter(self) -> None:
        """Kalman predict (towards source), update (towards the adapted model), ensemble.

        Each blend is ``t·a + ((1 − a)·s)`` evaluated as a scaled copy then an add, exactly as
        a per-tensor ``t.mul_(a).add_((1 − a) * s)`` rounds: on the flat hidden/source tensors
        for the first two stages, as list-wide ``torch._foreach_*`` calls for the last."""
        alpha, gamma = float(self.params["alpha"]), float(self.params["gamma"])
        if alpha < 1.0:
            _blend([self.hidden_flat], [self.source_flat], alpha)
        beta, self.hidden_var = kalman_gain(self.hidden_var, alpha, float(self.params["q"]))
        if beta < 1.0:
            _blend([self.hidden_flat], [self._flatten(self._filtered)], beta)
        if gamma < 1.0:
            _blend([q.detach() for q in self.trainable], [self.hidden[i] for i in self._adapted_slots], gamma)

    def extra_state(self) -> dict[str, Any]:
        return {
            "hidden": self.hidden_flat.clone(),
            "hidden_var": self.hidden_var,
            "class_probs_ema": self.class_probs_ema.clone(),
            "rng": self.rng.state(),
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.hidden_flat.copy_(state["hidden"])
        self.hidden_var = float(state["hidden_var"])
        self.class_probs_ema = state["class_probs_ema"].clone()
        self.rng.load(state["rng"])


def _blend(targets: list[torch.Tensor], sources: list[torch.Tensor], a: float) -> None:
    """In place ``t ← t·a + (1 − a)·s`` for every pair (no-op when the lists are empty)."""
    if not targets:
        return
    scaled = torch._foreach_mul(sources, 1.0 - a)
    torch._foreach_mul_(targets, a)
    torch._foreach_add_(targets, scaled)


__all__ = ["CMF", "kalman_gain", "prior_corrected", "soft_likelihood_ratio", "symmetric_cross_entropy"]
