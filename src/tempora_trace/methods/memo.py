"""MEMO: marginal entropy minimisation over augmentations of each test point, reset per sample.

Zhang, Levine & Finn, "MEMO: Test Time Robustness via Adaptation and Augmentation", NeurIPS
2022. For every test image on its own, starting from the source model each time:

1. ``n_augmentations`` AugMix views of the image (32 on CIFAR, 64 on ImageNet): a random crop
   with flip (CIFAR: 4-px zero-padded 32-px crop; ImageNet: RandomResizedCrop), then three
   chains of one to three operations drawn from autocontrast, equalize, rotate, solarize,
   shear x/y, translate x/y and posterize at severity 1, mixed with Dirichlet(1, 1, 1) weights
   and blended with the cropped image by a Beta(1, 1) draw — the authors' operations and ranges;
2. one forward pass over the views and one SGD step (``lr`` 0.005 on CIFAR, 0.00025 on
   ImageNet, no momentum or weight decay, ``steps`` 1) on *every* parameter, minimising the
   entropy of the views' averaged prediction (the marginal entropy);
3. the prediction on the image itself with the adapted model;
4. the parameters return to the source values (the episodic reset: nothing carries over).

BatchNorm layers normalise with ``prior·source + (1 − prior)·test`` statistics, ``prior =
prior_strength / (prior_strength + 1)`` (16: the authors' ImageNet setting), the test
statistics taken from the batch being normalised without gradient, in adaptation and
prediction alike; ``prior_strength = -1`` keeps the source statistics.

Time split: all of 1–4 precedes (or, for the reset, immediately follows) each image's output,
and the next image needs the reset first, so the whole method is in ``predict`` (``e``) and
``adapt`` is empty (``ℓ`` ≈ 0). Nothing learnt survives the batch, so ``updated`` is always
false and frozen mode is the source model with the same normalisation. MEMO learns before it
predicts: it declares ``adapts_before_output``, and the conformance kit then checks that
``predict`` leaves every parameter as it found it instead of forbidding its backward pass.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import register
from .augment import MethodRNG, random_resized_crop_flip
from .base import Departure, MethodContext, MethodError, TTAMethod
from .gradient import check_params, dense_nchw
from .lazy_imports import lazy_module

#: torchvision's functional transforms (v2), imported when a method is built to run (lazy_imports)
TF = lazy_module("torchvision.transforms.v2.functional", globals(), "TF")

#: the grey the authors' geometric operations fill uncovered pixels with (PIL fillcolor 128)
FILL = 128 / 255


def marginal_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the mean of the views' softmax, computed in log space as the authors do."""
    log_p = logits.log_softmax(1)
    avg = torch.logsumexp(log_p, 0) - math.log(logits.shape[0])
    avg = avg.clamp(min=torch.finfo(avg.dtype).min)
    return -(avg * avg.exp()).sum()


class PriorBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d that normalises with ``prior·running + (1 − prior)·batch`` statistics (the
    batch's mean and unbiased variance, without gradient), whatever its mode; buffers never move."""

    prior: float = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            mean = x.mean((0, 2, 3))
            var = x.var((0, 2, 3), unbiased=True) if x[:, 0].numel() > 1 else torch.ones_like(mean)
            mean = self.prior * self.running_mean + (1 - self.prior) * mean
            var = self.prior * self.running_var + (1 - self.prior) * var
        return F.batch_norm(x, mean, var, self.weight, self.bias, False, 0.0, self.eps)


# ---------------------------------------------------------------------- AugMix (the authors' operations)
#: uniforms one view can consume: crop (3), mixing weights (3) and blend (1), three chains of
#: a depth and up to three operations of an index, a level and a sign each
DRAWS_PER_VIEW = 7 + 3 * (1 + 3 * 3)


class Draws:
    """The uniform numbers of one view, drawn at once from the method's generator (one host
    read per view instead of one per decision) and handed out in order."""

    def __init__(self, gen: torch.Generator, n: int = DRAWS_PER_VIEW):
        self.values = torch.rand(n, generator=gen, dtype=torch.float64).tolist()
        self.next = 0

    def uniform(self) -> float:
        value = self.values[self.next]
        self.next += 1
        return value

    def integer(self, lo: int, hi: int) -> int:
        """Uniform in ``lo .. hi - 1``."""
        return min(hi - 1, lo + int(self.uniform() * (hi - lo)))


def _level(draws: Draws) -> float:
    """The authors' ``rand_lvl(1)``: uniform in [0.1, 1)."""
    return 0.1 + 0.9 * draws.uniform()


def _sign(draws: Draws) -> float:
    return -1.0 if draws.uniform() > 0.5 else 1.0


@functools.lru_cache(maxsize=8)
def _pixel_centres(h: int, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32) + 0.5, torch.arange(w, dtype=torch.float32) + 0.5, indexing="ij")
    return ys, xs


def _affine(img: torch.Tensor, matrix: tuple[float, float, float, float, float, float]) -> torch.Tensor:
    """PIL's ``Image.transform(AFFINE, matrix, BILINEAR, fillcolor=128)``: output pixel (x, y)
    samples the input at (a·x + b·y + c, d·x + e·y + f), pixel centres at +½; a sample outside
    the image is the fill, one inside is bilinear with the edge pixels repeated, as in PIL."""
    _, h, w = img.shape
    a, b, c, d, e, f = matrix
    ys, xs = _pixel_centres(h, w)
    sx, sy = a * xs + b * ys + c, d * xs + e * ys + f
    grid = torch.stack([2 * sx / w - 1, 2 * sy / h - 1], -1).unsqueeze(0).to(img.device)
    out = F.grid_sample(img.unsqueeze(0), grid, mode="bilinear", padding_mode="border", align_corners=False).squeeze(0)
    outside = ((sx < 0) | (sx >= w) | (sy < 0) | (sy >= h)).to(img.device)
    return out.masked_fill(outside, FILL)


def _rotate(img: torch.Tensor, draws: Draws) -> torch.Tensor:
    degrees = int(_level(draws) * 30 / 10) * _sign(draws)
    a = -math.radians(degrees)
    _, h, w = img.shape
    cx, cy = w / 2, h / 2
    m = (math.cos(a), math.sin(a), 0.0, -math.sin(a), math.cos(a), 0.0)
    c = m[0] * -cx + m[1] * -cy + cx
    f = m[3] * -cx + m[4] * -cy + cy
    return _affine(img, (m[0], m[1], c, m[3], m[4], f))


def _shear(axis: int):
    def op(img: torch.Tensor, draws: Draws) -> torch.Tensor:
        level = _level(draws) * 0.3 / 10 * _sign(draws)
        return _affine(img, (1, level, 0, 0, 1, 0) if axis == 0 else (1, 0, 0, level, 1, 0))

    return op


def _translate(axis: int):
    def op(img: torch.Tensor, draws: Draws) -> torch.Tensor:
        side = img.shape[2 - axis]
        level = int(_level(draws) * (side / 3) / 10) * _sign(draws)
        return _affine(img, (1, 0, level, 0, 1, 0) if axis == 0 else (1, 0, 0, 0, 1, level))

    return op


def _as_uint8(img: torch.Tensor) -> torch.Tensor:
    return (img * 255).round().clamp(0, 255).to(torch.uint8)


def _autocontrast(img: torch.Tensor, draws: Draws) -> torch.Tensor:
    return TF.autocontrast(img)


def _equalize(img: torch.Tensor, draws: Draws) -> torch.Tensor:
    return TF.equalize(_as_uint8(img)).float() / 255


def _solarize(img: torch.Tensor, draws: Draws) -> torch.Tensor:
    level = int(_level(draws) * 256 / 10)
    return TF.solarize(_as_uint8(img), 256 - level).float() / 255


def _posterize(img: torch.Tensor, draws: Draws) -> torch.Tensor:
    level = int(_level(draws) * 4 / 10)
    return TF.posterize(_as_uint8(img), 4 - level).float() / 255


#: AugMix's operations as MEMO uses them (no colour, contrast, brightness or sharpness)
OPERATIONS = (
    _autocontrast,
    _equalize,
    _rotate,
    _solarize,
    _shear(0),
    _shear(1),
    _translate(0),
    _translate(1),
    _posterize,
)


def _crop_flip_cifar(img: torch.Tensor, draws: Draws) -> torch.Tensor:
    """RandomCrop(side, padding=4) with zero padding, then a horizontal flip with p = ½."""
    _, h, w = img.shape
    padded = F.pad(img, (4, 4, 4, 4))
    top, left = draws.integer(0, 9), draws.integer(0, 9)
    out = padded[:, top : top + h, left : left + w]
    return out.flip(-1) if draws.uniform() < 0.5 else out


def augmix_view(img: torch.Tensor, gen: torch.Generator, imagenet: bool) -> torch.Tensor:
    """One MEMO view of ``img`` ([3, H, W] in [0, 1], on the CPU)."""
    draws = Draws(gen)
    if imagenet:
        base = random_resized_crop_flip(img.unsqueeze(0), gen, scale=(0.08, 1.0)).squeeze(0)
        draws.next = 3
    else:
        base = _crop_flip_cifar(img, draws)
    base = _as_uint8(base).float() / 255  # the authors' views start from an 8-bit image
    weights = [-math.log(max(draws.uniform(), 1e-12)) for _ in range(3)]
    weights = [w / sum(weights) for w in weights]  # Dirichlet(1, 1, 1)
    m = draws.uniform()  # Beta(1, 1)
    mix = torch.zeros_like(base)
    for i in range(3):
        view = base
        for _ in range(draws.integer(1, 4)):
            op = OPERATIONS[draws.integer(0, len(OPERATIONS))]
            view = _as_uint8(op(view, draws)).float() / 255
        mix = mix + weights[i] * view
    return m * base + (1 - m) * mix


@register
class MEMO(TTAMethod):
    """Per test image: marginal entropy over its AugMix views, one SGD step on every parameter,
    the prediction, the source parameters back. Time split: all of it is ``predict`` (``e``);
    ``adapt`` is empty (``ℓ`` ≈ 0)."""

    name = "memo"
    family = "gradient-based"
    paper = "Zhang, Levine & Finn, MEMO: Test Time Robustness via Adaptation and Augmentation, NeurIPS 2022"
    updates = "every parameter, for one test point at a time, then back to the source (nothing carries over)"
    overhead = "intrinsic: per image, AugMix views, a forward and backward over them and an SGD step before its output"
    adapts_before_output = True
    kit_params = {"n_augmentations": 4}
    departures = (
        Departure(
            point="augmentation arithmetic",
            default="the authors' AugMix operations and ranges on tensors (bilinear affine sampling, 8-bit rounding after each operation)",
            reference="as default",
            reason="one code path on every device; the geometric operations match PIL's to one grey level (rounding)",
            authors="PIL operations on 8-bit images",
        ),
        Departure(
            point="ImageNet views' crop",
            default="RandomResizedCrop (area 0.08-1) of the model's input, the preprocessed centre crop, resized back to its side",
            reference="as default",
            reason="a method sees the batch the tracer feeds the model, not the decoded file",
            authors="RandomResizedCrop(224) of the whole decoded image",
        ),
    )

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        """CIFAR: 32 views, lr 0.005 (the authors' CIFAR-10 script); ImageNet: 64 views, lr
        0.00025 (their ResNet-50 setting); one step; BN prior strength 16."""
        imagenet = context.dataset_family != "cifar"
        return {"n_augmentations": 64 if imagenet else 32, "lr": 0.00025 if imagenet else 0.005, "steps": 1, "prior_strength": 16.0}

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        check_params(self, non_negative=("lr",), positive_ints=("n_augmentations", "steps"))
        strength = float(self.params["prior_strength"])
        if strength < 0 and strength != -1:
            raise MethodError(f"method 'memo': option prior_strength must be >= 0 or -1 (source statistics), not {strength!r}")
        model.eval()
        if strength >= 0:
            for m in model.modules():
                if type(m) is nn.BatchNorm2d and m.running_mean is not None:
                    m.__class__ = PriorBatchNorm2d
                    m.prior = strength / (strength + 1)
        self.params_adapted = [p for p in model.parameters()]
        model.requires_grad_(True)
        if not self.params_adapted:
            raise MethodError("method 'memo' found no parameters to adapt in this model")
        self.optimizer = torch.optim.SGD(self.params_adapted, lr=self.params["lr"], momentum=0.0, weight_decay=0.0)
        self.source = [p.detach().clone() for p in self.params_adapted]
        self.rng = MethodRNG()
        self.imagenet = context.dataset_family != "cifar"

    def views(self, img: torch.Tensor) -> torch.Tensor:
        gen = self.rng.get("cpu")
        cpu = img.detach().to("cpu", torch.float32)
        return torch.stack([augmix_view(cpu, gen, self.imagenet) for _ in range(int(self.params["n_augmentations"]))]).to(
            img.device, img.dtype
        )

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        self.last_updated = False
        x = dense_nchw(x)
        if self.frozen:
            with torch.no_grad():
                return self.model(x)
        outputs = []
        for img in x:
            views = self.views(img)
            with torch.enable_grad():
                for _ in range(int(self.params["steps"])):
                    loss = marginal_entropy(self.model(views))
                    loss.backward()
                    self.optimizer.step()
                    self.optimizer.zero_grad(set_to_none=True)
            with torch.no_grad():
                outputs.append(self.model(img.unsqueeze(0)))
                for p, s in zip(self.params_adapted, self.source):
                    p.copy_(s)
        return torch.cat(outputs)

    def extra_state(self) -> dict[str, Any]:
        return {"rng": self.rng.state()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.rng.load(state["rng"])
