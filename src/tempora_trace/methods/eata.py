"""EATA: ETA's sample selection plus a Fisher regulariser against forgetting.

Niu et al., "Efficient Test-Time Model Adaptation without Forgetting", ICML 2022
(arXiv:2204.02610). Per batch, EATA does what ETA (:mod:`.eta`) does: keep the reliable samples
(entropy below ``e_margin`` = 0.4·ln C), of those the non-redundant ones (|cos| of their
probabilities with the moving average below ``d_margin`` ε), update that average, and minimise
the re-weighted entropy ``mean(entropy · exp(e_margin − entropy))`` with SGD on the affine
parameters of the normalisation layers. EATA adds to that loss the anti-forgetting term
``fisher_alpha · Σ_i F_i · (θ_i − θ_i⁰)²`` over the adapted parameters, with ``θ⁰`` the source parameters and ``F`` the diagonal Fisher
information estimated once, before the stream, from ``fisher_size`` clean source samples: the
model (normalisation on batch statistics, as it adapts) labels each batch of them with its own
arg-max, and ``F`` is the mean over batches of the squared gradient of the batch's
cross-entropy, as in the authors' code. The source samples are the dataset's clean split
(:attr:`MethodContext.source_images`: the demo set's clean test images, ImageNet's or CIFAR's
clean validation/test set), the first ``fisher_size`` of a fixed shuffled order, in batches of
the run's batch size; the authors use the clean ImageNet validation set the same way.
``fisher_alpha = 0`` needs no source samples and is ETA.

Defaults: ``fisher_size`` 2000, ``fisher_alpha`` 2000 on ImageNet (the authors') and 1 on CIFAR
(the benchmark configuration of mariodoebler/test-time-adaptation); ε 0.05 / 0.4 / 0.1 on
ImageNet / CIFAR-10 / CIFAR-100; SGD as ETA. The Fisher estimate runs at construction,
before any timed event; the filters, the backward pass through both terms and the step come
after the prediction, so the per-batch work is in ``adapt`` (``ℓ``) and ``predict`` (``e``) is
the forward pass alone, as for ETA.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import TraceError
from . import register
from .base import MethodContext, MethodError, no_stat_tracking
from .eta import ETA
from .gradient import dense_nchw


@register
class EATA(ETA):
    """ETA's filtered, re-weighted entropy plus a Fisher-weighted pull towards the source.
    Time split: the forward pass is ``predict`` (``e``); filters, backward and step are
    ``adapt`` (``ℓ``); the Fisher estimate runs once at construction, untimed."""

    name = "eata"
    paper = "Niu et al., Efficient Test-Time Model Adaptation without Forgetting (EATA), ICML 2022"
    updates = "affine parameters of all normalisation layers, held near the source by a Fisher-weighted penalty"
    overhead = "extrinsic: entropy filters, backward through the entropy and Fisher terms, SGD step after the prediction"

    non_negative_options = ("lr", "e_margin", "d_margin", "fisher_alpha")
    positive_int_options = ("fisher_size",)

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        return {
            **super().default_params(context),
            "fisher_alpha": 1.0 if context.dataset_family == "cifar" else 2000.0,
            "fisher_size": 2000,
        }

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        #: per adapted parameter: its diagonal Fisher estimate and its source value θ⁰
        self.fisher: list[torch.Tensor] = []
        self.anchors: list[torch.Tensor] = []
        #: samples the Fisher estimate used (fewer than fisher_size where the split is smaller)
        self.fisher_samples = 0
        if self.params["fisher_alpha"] > 0:
            self.fisher = self.estimate_fisher()
            self.anchors = [p.detach().clone() for _, p in self.adapted]

    def estimate_fisher(self) -> list[torch.Tensor]:
        """The diagonal Fisher of the adapted parameters on the clean source samples: the mean
        over batches of the squared gradient of the cross-entropy with the model's own
        arg-max labels. BatchNorm runs on batch statistics without moving its buffers."""
        if self.context.source_images is None:
            raise MethodError(
                "method 'eata' needs clean source images for its Fisher regulariser and this run gives none; "
                "pass fisher_alpha=0 to run without it (that is ETA)"
            )
        params = [p for _, p in self.adapted]
        device = params[0].device
        total = [torch.zeros_like(p) for p in params]
        batches = samples = 0
        try:
            source = self.context.source_images(int(self.params["fisher_size"]), max(1, int(self.context.batch_size)))
            with torch.enable_grad(), no_stat_tracking(self.bn_layers):
                for images in source:
                    outputs = self.model(dense_nchw(images.to(device)))
                    loss = F.cross_entropy(outputs, outputs.argmax(1))
                    grads = torch.autograd.grad(loss, params, allow_unused=True)
                    for acc, g in zip(total, grads):
                        if g is not None:
                            acc.add_(g.detach() ** 2)
                    batches += 1
                    samples += images.shape[0]
        except TraceError as exc:
            raise MethodError(
                f"method 'eata': cannot read source samples for its Fisher regulariser ({exc}); pass fisher_alpha=0 to run without it"
            ) from None
        if batches == 0:
            raise MethodError(
                "method 'eata': the dataset's clean split is empty; pass fisher_alpha=0 to run without the Fisher regulariser"
            )
        self.fisher_samples = samples
        return [acc / batches for acc in total]

    def fisher_penalty(self) -> torch.Tensor | None:
        """``fisher_alpha · Σ F·(θ − θ⁰)²`` over the adapted parameters (None when off)."""
        if not self.fisher:
            return None
        penalty = sum((f * (p - a) ** 2).sum() for f, (_, p), a in zip(self.fisher, self.adapted, self.anchors))
        return self.params["fisher_alpha"] * penalty

    def _step(self, loss: torch.Tensor) -> None:
        penalty = self.fisher_penalty()
        super()._step(loss if penalty is None else loss + penalty)
