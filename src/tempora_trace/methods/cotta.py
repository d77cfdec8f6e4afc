"""CoTTA: continual test-time adaptation with a weight-averaged, augmentation-averaged teacher.

Wang, Fink, Van Gool & Dai, "Continual Test-Time Domain Adaptation", CVPR 2022
(arXiv:2203.13591). Three models: the student (all affine and convolution ``weight``/``bias``
parameters trained, BatchNorm on batch statistics), an EMA teacher (``t ← α·t + (1 − α)·s``,
α = 0.999) whose output is the prediction, and the frozen source model as an anchor. When the
anchor's mean top-1 confidence on the batch is below the threshold ``confidence_threshold``
the teacher's prediction is the mean of its outputs over ``n_augmentations`` random
augmentations of the batch (colour jitter with gamma, edge padding, affine, blur, crop, flip,
Gaussian noise; one draw per augmented copy for the whole batch, as the authors' batched
transform does), otherwise its output on the batch itself. The student then takes one step
on the cross-entropy towards the teacher's prediction (symmetric on ImageNet, as in the
authors' ImageNet code), the teacher takes one EMA step, and every element of every adapted
parameter returns to its source value with probability ``restore_probability``.

Published defaults (the authors' configurations): CIFAR-10 Adam lr 1e-3, threshold 0.92,
restore 0.01; CIFAR-100 the same with threshold 0.72; ImageNet SGD lr 0.01 (momentum 0.9,
Nesterov), threshold 0.1, restore 0.001, symmetric cross-entropy; 32 augmentations.

The option ``augment`` chooses when the augmented forwards run: ``when_unsure`` runs them only
when the anchor is unsure (the authors' ImageNet code), ``always`` runs them on every batch and
uses them only when unsure (the authors' CIFAR code, where they cost about 32 teacher
forwards on every batch whatever the confidence). The default follows the authors' code for
the dataset family.

Time split: ``e`` (``predict``) holds the anchor forward, the teacher forward and, when they
run, the augmented teacher forwards; ``ℓ`` (``adapt``) holds the student forward, backward
and optimiser step, the EMA teacher update and the stochastic restore. Frozen mode predicts
with the teacher alone on its running BatchNorm statistics (no anchor, no augmentation).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import register
from .base import AS_DEFAULT, Departure, MethodContext, MethodError, no_stat_tracking
from .gradient import TRACKED_BN_STATISTICS
from .lazy_imports import lazy_module
from .teacher import TeacherStudentMethod

#: torchvision's functional transforms, imported when a method is built to run (lazy_imports)
TF = lazy_module("torchvision.transforms.functional", globals(), "TF")

__all__ = ["CoTTA", "cotta_augment", "cotta_confidence_threshold", "soft_cross_entropy", "symmetric_cross_entropy"]

#: when the augmented teacher forwards run
AUGMENT_CHOICES = ("when_unsure", "always")


def _uniform(gen: torch.Generator, lo: float, hi: float) -> float:
    return lo + (hi - lo) * torch.rand((), generator=gen, device=gen.device).item()


def cotta_augment(
    x: torch.Tensor, gen: torch.Generator, gaussian_std: float = 0.005, noise_gen: torch.Generator | None = None
) -> torch.Tensor:
    """One draw of the CoTTA authors' test-time augmentation (their non-soft setting), applied
    to the whole batch ``x`` (float NCHW in [0, 1]): clip; brightness 0.6–1.4, contrast
    0.7–1.3, saturation 0.5–1.5, hue ±0.06 and gamma 0.7–1.3 in random order; edge padding by
    half the side; affine with rotation ±15°, translation up to 1/16 of the padded side,
    scale 0.9–1.1 (bilinear, zero fill); Gaussian blur (kernel 5, σ 0.001–0.5); centre crop
    back; horizontal flip with probability 0.5; Gaussian noise (σ ``gaussian_std``) per pixel;
    clip. RoTTA uses the same transform on its memory bank.

    The transform's parameters come from ``gen`` (keep it on the CPU: each is read to the
    host, which on a GPU generator would be a synchronisation per parameter, as the authors'
    CPU draws are not); the noise comes from ``noise_gen`` (default ``gen``), best on the
    batch's device."""
    h, w = x.shape[-2:]
    out = x.clamp(0.0, 1.0)
    order = torch.randperm(5, generator=gen, device=gen.device).tolist()
    for fn in order:
        if fn == 0:
            out = TF.adjust_brightness(out, _uniform(gen, 0.6, 1.4))
        elif fn == 1:
            out = TF.adjust_contrast(out, _uniform(gen, 0.7, 1.3))
        elif fn == 2:
            out = TF.adjust_saturation(out, _uniform(gen, 0.5, 1.5))
        elif fn == 3:
            out = TF.adjust_hue(out, _uniform(gen, -0.06, 0.06))
        else:
            out = TF.adjust_gamma(out.clamp(1e-8, 1.0), _uniform(gen, 0.7, 1.3))
    pad_h, pad_w = h // 2, w // 2
    out = F.pad(out, (pad_w, pad_w, pad_h, pad_h), mode="replicate")
    ph, pw = out.shape[-2:]
    angle = _uniform(gen, -15.0, 15.0)
    tx = int(round(_uniform(gen, -pw / 16.0, pw / 16.0)))
    ty = int(round(_uniform(gen, -ph / 16.0, ph / 16.0)))
    scale = _uniform(gen, 0.9, 1.1)
    out = TF.affine(
        out, angle=angle, translate=[tx, ty], scale=scale, shear=[0.0, 0.0], interpolation=TF.InterpolationMode.BILINEAR, fill=0.0
    )
    out = blur_centre_crop(out, h, w, _uniform(gen, 0.001, 0.5))
    if torch.rand((), generator=gen, device=gen.device).item() < 0.5:
        out = TF.hflip(out)
    noise_gen = gen if noise_gen is None else noise_gen
    noise = torch.randn(out.shape, generator=noise_gen, device=noise_gen.device).to(out.device)
    return (out + gaussian_std * noise).clamp(0.0, 1.0)


def blur_centre_crop(x: torch.Tensor, h: int, w: int, sigma: float, kernel: int = 5) -> torch.Tensor:
    """``center_crop(gaussian_blur(x, kernel, sigma), [h, w])`` computed on the crop alone: each
    output pixel of a ``kernel``-wide blur reads only its neighbours within ``kernel // 2``, so
    the crop with that margin, blurred without padding, gives the same pixels at a fraction of
    the work (the blur of the whole padded image was most of CoTTA's augmentation time on a
    CPU). Falls back to blurring the whole image when the margin does not fit."""
    r = kernel // 2
    ph, pw = x.shape[-2:]
    top, left = int(round((ph - h) / 2.0)), int(round((pw - w) / 2.0))
    if top < r or left < r or top + h + r > ph or left + w + r > pw:
        return TF.center_crop(TF.gaussian_blur(x, kernel_size=[kernel, kernel], sigma=[sigma, sigma]), [h, w])
    grid = torch.linspace(-r, r, kernel, dtype=x.dtype, device=x.device)
    pdf = torch.exp(-0.5 * (grid / sigma) ** 2)
    k1 = pdf / pdf.sum()
    weights = (k1[:, None] * k1[None, :]).expand(x.shape[-3], 1, kernel, kernel)
    region = x[..., top - r : top + h + r, left - r : left + w + r]
    return F.conv2d(region, weights, groups=x.shape[-3])


def soft_cross_entropy(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Per-sample ``−Σ softmax(teacher)·log_softmax(student)`` (the CIFAR loss)."""
    return -(teacher.softmax(1) * student.log_softmax(1)).sum(1)


def symmetric_cross_entropy(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Per-sample mean of the cross-entropies in both directions (the ImageNet loss)."""
    return 0.5 * soft_cross_entropy(student, teacher) + 0.5 * soft_cross_entropy(teacher, student)


def cotta_confidence_threshold(context: MethodContext) -> float:
    """The authors' threshold on the anchor's mean confidence: CIFAR-10 0.92, CIFAR-100 0.72
    (more than ten classes), ImageNet 0.1."""
    if context.dataset_family != "cifar":
        return 0.1
    return 0.92 if context.num_classes <= 10 else 0.72


@register
class CoTTA(TeacherStudentMethod):
    name = "cotta"
    compatible_norms = frozenset({"bn"})
    kit_params = {"n_augmentations": 4}
    paper = "Wang et al., Continual Test-Time Domain Adaptation (CVPR 2022)"
    updates = "every weight and bias (student, one step); EMA teacher; stochastic restore"
    overhead = "intrinsic: anchor + teacher forwards, 32 augmented teacher forwards when unsure (always, with augment=always); extrinsic: student forward, backward, step, EMA, restore"
    uses_anchor = True
    non_negative_options = ("lr",)
    fraction_options = ("momentum", "bn_momentum", "teacher_momentum", "restore_probability", "confidence_threshold")
    positive_int_options = ("n_augmentations",)
    departures = (
        TRACKED_BN_STATISTICS,
        Departure(
            point="BatchNorm buffers during the augmented teacher forwards",
            default="left alone (the views use their own batch statistics; only the clean teacher forward is tracked)",
            reference=AS_DEFAULT,
            authors="nothing to move (running statistics are not tracked)",
            reason="the statistics frozen inference uses should describe the clean target stream",
        ),
        Departure(
            point="random draws",
            default="a method-owned generator (augmentations and restore masks), part of the snapshot",
            reference=AS_DEFAULT,
            authors="the global torch generator",
            reason="reset, snapshot and restore must replay the adapt path bit for bit (docs/design/design.md §2)",
        ),
    )

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        cifar = context.dataset_family == "cifar"
        return {
            "optimizer": "adam" if cifar else "sgd",
            "lr": 1e-3 if cifar else 0.01,
            "momentum": 0.9,
            "teacher_momentum": 0.999,
            "restore_probability": 0.01 if cifar else 0.001,
            "confidence_threshold": cotta_confidence_threshold(context),
            "n_augmentations": 32,
            "augment": "always" if cifar else "when_unsure",
            "loss": "cross_entropy" if cifar else "symmetric",
            "source_stats": "discard",
            "bn_momentum": 0.1,
        }

    def validate(self) -> None:
        for key, choices in (("augment", AUGMENT_CHOICES), ("optimizer", ("adam", "sgd")), ("loss", ("cross_entropy", "symmetric"))):
            if self.params[key] not in choices:
                raise MethodError(f"method '{self.name}': option {key} must be one of {', '.join(choices)}, not {self.params[key]!r}")

    def choose_parameters(self, model: nn.Module) -> list[tuple[str, nn.Parameter]]:
        """Every parameter named ``weight`` or ``bias`` (the authors train them all)."""
        return [(n, p) for n, p in model.named_parameters() if n.rsplit(".", 1)[-1] in ("weight", "bias")]

    def build_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        if self.params["optimizer"] == "adam":
            return torch.optim.Adam(params, lr=self.params["lr"], betas=(self.params["momentum"], 0.999), weight_decay=0.0)
        return torch.optim.SGD(
            params, lr=self.params["lr"], momentum=self.params["momentum"], dampening=0.0, nesterov=True, weight_decay=0.0
        )

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        #: did the last prediction use the augmentation average? (a diagnostic)
        self.last_augmented = False
        #: the anchor's mean top-1 confidence on the last batch (a diagnostic)
        self.last_anchor_confidence = math.nan

    # ------------------------------------------------------------------ e
    def anchor_confidence(self, x: torch.Tensor) -> float:
        """Mean over the batch of the anchor's top-1 softmax probability."""
        assert self.anchor is not None
        return self.anchor(x).softmax(1).max(1).values.mean().item()

    def augmented_mean(self, x: torch.Tensor) -> torch.Tensor:
        """The teacher's mean output over ``n_augmentations`` augmented copies of ``x``; the
        views do not move the teacher's tracked BatchNorm statistics."""
        params, noise = self.rng.get("cpu"), self.rng.get(x.device)
        with no_stat_tracking(self.teacher_bn_layers):
            outs = [self.teacher(cotta_augment(x, params, noise_gen=noise)) for _ in range(int(self.params["n_augmentations"]))]
        return torch.stack(outs).mean(0)

    def teacher_output(self, x: torch.Tensor) -> torch.Tensor:
        confidence = self.anchor_confidence(x)
        standard = self.teacher(x)
        unsure = confidence < float(self.params["confidence_threshold"])
        augmented = None
        if unsure or self.params["augment"] == "always":
            augmented = self.augmented_mean(x)
        self.last_anchor_confidence = confidence
        self.last_augmented = unsure
        return augmented if unsure and augmented is not None else standard

    # ------------------------------------------------------------------ ℓ
    def loss(self, x: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
        student = self.model(x)
        per_sample = soft_cross_entropy if self.params["loss"] == "cross_entropy" else symmetric_cross_entropy
        return per_sample(student, teacher_logits).mean(0)
