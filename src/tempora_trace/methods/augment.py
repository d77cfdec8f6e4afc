"""Auxiliary views shared by the two-forward methods (DeYO, CMF, SPA, ZeroSIAM).

Every random draw goes through a method-owned :class:`MethodRNG` whose state is part of the
method's snapshot, so ``reset()``/``restore()`` replay the adapt path bit-identically even if
the tracer consumed global randomness in between (docs/design/design.md §2). All views take and return float
CHW batches in the Tempora convention ([0, 1], the model normalises internally).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Any, Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

from .base import classifier_head
from .gradient import GradientMethod, dense_nchw
from .lazy_imports import lazy_module
from .rng import MethodRNG

#: torchvision's functional transforms, imported when a method is built to run (lazy_imports)
TF = lazy_module("torchvision.transforms.functional", globals(), "TF")

__all__ = [
    "DetachedTargetMethod",
    "MethodRNG",
    "PatchNoise",
    "ProjectorView",
    "cmf_augment",
    "low_frequency_amplitude_mask",
    "patch_shuffle",
    "random_resized_crop_flip",
]


def _uniform(gen: torch.Generator, lo: float, hi: float) -> float:
    return lo + (hi - lo) * torch.rand((), generator=gen, device=gen.device).item()


# ---------------------------------------------------------------------- DeYO
def patch_shuffle(x: torch.Tensor, grid: int, gen: torch.Generator) -> torch.Tensor:
    """Cut each image into ``grid × grid`` patches and permute them independently per image
    (DeYO's "patch" augmentation; sides not divisible by ``grid`` are resized to a multiple
    and back, as the authors do)."""
    b, c, h, w = x.shape
    hh, ww = (h // grid) * grid, (w // grid) * grid
    resized = (hh, ww) != (h, w)
    if resized:
        x = F.interpolate(x, size=(hh, ww), mode="bilinear", align_corners=False, antialias=True)
    ph, pw = hh // grid, ww // grid
    patches = x.reshape(b, c, grid, ph, grid, pw).permute(0, 2, 4, 1, 3, 5).reshape(b, grid * grid, c, ph, pw)
    perm = torch.argsort(torch.rand(b, grid * grid, generator=gen, device=gen.device), dim=1).to(x.device)
    patches = patches[torch.arange(b, device=x.device).unsqueeze(1), perm]
    out = patches.reshape(b, grid, grid, c, ph, pw).permute(0, 3, 1, 4, 2, 5).reshape(b, c, hh, ww)
    if resized:
        out = F.interpolate(out, size=(h, w), mode="bilinear", align_corners=False, antialias=True)
    return out


# ---------------------------------------------------------------------- CMF
def cmf_augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """The CMF authors' consistency view (their CoTTA-derived transform without the extra
    CoTTA blur/noise): colour jitter with gamma in random order, reflect-pad by half the side,
    random affine (±15°, translate 1/16, scale 0.9–1.1, bilinear), centre crop back, random
    horizontal flip, clip to [0, 1]. One draw per batch, as their batched transform does."""
    h, w = x.shape[-2:]
    out = x.clamp(0.0, 1.0)
    order = torch.randperm(5, generator=gen, device=gen.device).tolist()
    factors = {
        0: _uniform(gen, 0.6, 1.4),  # brightness
        1: _uniform(gen, 0.7, 1.3),  # contrast
        2: _uniform(gen, 0.5, 1.5),  # saturation
        3: _uniform(gen, -0.06, 0.06),  # hue
        4: _uniform(gen, 0.7, 1.3),  # gamma
    }
    for fn in order:
        if fn == 0:
            out = TF.adjust_brightness(out, factors[0])
        elif fn == 1:
            out = TF.adjust_contrast(out, factors[1])
        elif fn == 2:
            out = TF.adjust_saturation(out, factors[2])
        elif fn == 3:
            out = TF.adjust_hue(out, factors[3])
        else:
            out = TF.adjust_gamma(out.clamp(1e-8, 1.0), factors[4])
    pad_h, pad_w = h // 2, w // 2
    out = F.pad(out, (pad_w, pad_w, pad_h, pad_h), mode="reflect")
    ph, pw = out.shape[-2:]
    angle = _uniform(gen, -15.0, 15.0)
    max_dx, max_dy = pw / 16.0, ph / 16.0
    tx = int(round(_uniform(gen, -max_dx, max_dx)))
    ty = int(round(_uniform(gen, -max_dy, max_dy)))
    scale = _uniform(gen, 0.9, 1.1)
    out = TF.affine(
        out, angle=angle, translate=[tx, ty], scale=scale, shear=[0.0, 0.0], interpolation=TF.InterpolationMode.BILINEAR, fill=0.0
    )
    out = TF.center_crop(out, [h, w])
    if torch.rand((), generator=gen, device=gen.device).item() < 0.5:
        out = TF.hflip(out)
    return out.clamp(0.0, 1.0)


def _resized_crop_box(
    h: int, w: int, gen: torch.Generator, scale: tuple[float, float], ratio: tuple[float, float]
) -> tuple[int, int, int, int]:
    """Top, left, height, width of one RandomResizedCrop box: up to ten tries at an area
    fraction in ``scale`` and a log-uniform aspect ratio in ``ratio``, else the central crop
    with the aspect ratio clamped (the usual torchvision sampling, on ``gen``)."""
    area = h * w
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = area * _uniform(gen, scale[0], scale[1])
        aspect = math.exp(_uniform(gen, log_lo, log_hi))
        cw = int(round(math.sqrt(target * aspect)))
        ch = int(round(math.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            top = int(torch.randint(0, h - ch + 1, (1,), generator=gen).item())
            left = int(torch.randint(0, w - cw + 1, (1,), generator=gen).item())
            return top, left, ch, cw
    in_ratio = w / h
    if in_ratio < ratio[0]:
        cw, ch = w, int(round(w / ratio[0]))
    elif in_ratio > ratio[1]:
        ch, cw = h, int(round(h * ratio[1]))
    else:
        cw, ch = w, h
    return (h - ch) // 2, (w - cw) // 2, ch, cw


def random_resized_crop_flip(
    x: torch.Tensor, gen: torch.Generator, scale: tuple[float, float] = (0.5, 1.0), ratio: tuple[float, float] = (3 / 4, 4 / 3)
) -> torch.Tensor:
    """The Tempora reference's CMF view: per image, a RandomResizedCrop (area ``scale``,
    antialiased bilinear resize back to the input side) and a horizontal flip with p = ½.
    Parameters are drawn per image on the host, one crop call per image, as the reference's
    per-image ``torchvision.transforms.v2`` pipeline does (that loop is part of its cost)."""
    h, w = x.shape[-2:]
    out = []
    for img in x:
        top, left, ch, cw = _resized_crop_box(h, w, gen, scale, ratio)
        view = TF.resized_crop(img, top, left, ch, cw, [h, w], interpolation=TF.InterpolationMode.BILINEAR, antialias=True)
        if torch.rand((), generator=gen, device=gen.device).item() < 0.5:
            view = TF.hflip(view)
        out.append(view)
    return torch.stack(out)


# ---------------------------------------------------------------------- SPA
# SPA's views are defined on normalised images in [-1, 1] (ViT's mean 0.5 / std 0.5); Tempora
# models take [0, 1], so the views map to z = 2x − 1, perturb, and map back.
def _to_centred(x: torch.Tensor) -> torch.Tensor:
    return x * 2.0 - 1.0


def _from_centred(z: torch.Tensor) -> torch.Tensor:
    return (z + 1.0) * 0.5


def _symmetric_mask(mask: torch.Tensor) -> torch.Tensor:
    """Make a centred (fftshift-ed) spectrum mask point-symmetric, so dropping frequency k also
    drops −k and the inverse FFT of the masked amplitude stays a real image."""
    sh = 1 - mask.shape[-2] % 2
    sw = 1 - mask.shape[-1] % 2
    sub = mask[..., sh:, sw:].clone()
    mh, mw = sub.shape[-2] // 2, sub.shape[-1] // 2
    sub[..., sub.shape[-2] - mh :, :] = 1.0
    sub[..., mh, :mw] = 1.0
    sub = sub * torch.flip(sub, dims=(-2, -1))
    mask = mask.clone()
    mask[..., sh:, sw:] = sub
    return mask


def low_frequency_amplitude_mask(x: torch.Tensor, mask_ratio: float, region: float, gen: torch.Generator) -> torch.Tensor:
    """SPA's low-frequency view: drop a random ``mask_ratio`` of the Fourier amplitudes in the
    central ``region``-fraction square of the shifted spectrum (the low frequencies), keep the
    phase, invert. Not clipped, as in the authors' code."""
    z = _to_centred(x)
    h, w = z.shape[-2:]
    rh, rw = max(1, int(h * region)), max(1, int(w * region))
    top, left = (h - rh) // 2, (w - rw) // 2
    low = torch.zeros(1, z.shape[1], h, w, device=z.device, dtype=z.dtype)
    low[..., h - top - rh : h - top, w - left - rw : w - left] = 1.0
    fft = torch.fft.fft2(z, dim=(-2, -1))
    amp, phase = fft.abs(), fft.angle()
    amp = torch.fft.fftshift(amp, dim=(-2, -1))
    keep = torch.bernoulli(torch.full(amp.shape, 1.0 - mask_ratio, device=gen.device, dtype=amp.dtype), generator=gen).to(amp.device)
    mask = _symmetric_mask(low * keep + (1.0 - low))
    amp = torch.fft.ifftshift(amp * mask, dim=(-2, -1))
    z = torch.fft.ifft2(torch.polar(amp, phase), dim=(-2, -1)).real
    return _from_centred(z)


class PatchNoise(nn.Module):
    """SPA's high-frequency view: each ``patch × patch`` block is blended with Gaussian noise,
    ``(1 − a_k²)·z + a_k²·ε``, with one learnable (adversarially trained) ``a_k`` per patch and
    one noise draw shared by the batch, clipped to [−1, 1] in the centred space."""

    def __init__(self, image_size: int, patch: int, noise_ratio: float):
        super().__init__()
        if image_size % patch:
            raise ValueError(f"image side {image_size} is not a multiple of the noise patch {patch}")
        self.patch = patch
        self.grid = image_size // patch
        self.noise_ratio = noise_ratio
        self.alpha = nn.Parameter(torch.full((self.grid * self.grid,), math.sqrt(noise_ratio)))

    def forward(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        if x.shape[-1] != x.shape[-2] or x.shape[-1] != self.grid * self.patch:
            raise ValueError(f"patch noise built for {self.grid * self.patch}² images, got {tuple(x.shape[-2:])}")
        z = _to_centred(x)
        noise = torch.randn(z.shape[1:], generator=gen, device=gen.device, dtype=z.dtype).to(z.device)
        ratio = (self.alpha**2).view(self.grid, self.grid)
        ratio = ratio.repeat_interleave(self.patch, 0).repeat_interleave(self.patch, 1)
        z = (1.0 - ratio) * z + ratio * noise
        return _from_centred(z.clamp(-1.0, 1.0))

    def forward_per_patch(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """The Tempora reference's form of the same view: a Python loop over the patches, one
        noise draw and one slice assignment (recorded by autograd) per patch. Same distribution
        as :meth:`forward`, many more operations (196 iterations on a 224-px image)."""
        if x.shape[-1] != x.shape[-2] or x.shape[-1] != self.grid * self.patch:
            raise ValueError(f"patch noise built for {self.grid * self.patch}² images, got {tuple(x.shape[-2:])}")
        z = _to_centred(x)
        out = torch.empty_like(z)
        p = self.patch
        for k in range(self.grid * self.grid):
            top, left = (k // self.grid) * p, (k % self.grid) * p
            patch = z[..., top : top + p, left : left + p]
            noise = torch.randn(patch.shape[1:], generator=gen, device=gen.device, dtype=z.dtype).to(z.device)
            ratio = self.alpha[k] ** 2
            out[..., top : top + p, left : left + p] = (1.0 - ratio) * patch + ratio * noise
        return _from_centred(out.clamp_(-1.0, 1.0))

    @torch.no_grad()
    def renormalise(self) -> None:
        """Rescale so the mean noise ratio stays at its target, then clip to [−1, 1]."""
        current = (self.alpha**2).mean()
        self.alpha.div_(torch.sqrt(current / self.noise_ratio))
        self.alpha.clamp_(-1.0, 1.0)


# ---------------------------------------------------------------------- projector view
class ProjectorView:
    """A ``d × d`` linear projector (no bias, identity at start) inserted in front of the
    model's final ``nn.Linear`` by a forward pre-hook, active only inside :meth:`active`.

    This is the BYOL-style predictor SPA and ZeroSIAM route their perturbed view through; at
    the identity it leaves the clean model untouched, and it is never used for predictions."""

    def __init__(self, model: nn.Module):
        head = classifier_head(model)
        dim = head.in_features
        self.projector = nn.Linear(dim, dim, bias=False, device=head.weight.device, dtype=head.weight.dtype)
        with torch.no_grad():
            nn.init.eye_(self.projector.weight)
        self._on = False
        self._handle = head.register_forward_pre_hook(self._hook)

    def _hook(self, module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        if not self._on:
            return None
        return (self.projector(args[0]),) + tuple(args[1:])

    @contextmanager
    def active(self) -> Iterator[None]:
        self._on = True
        try:
            yield
        finally:
            self._on = False

    def remove(self) -> None:
        self._handle.remove()


class DetachedTargetMethod(GradientMethod):
    """Base for SPA and ZeroSIAM: the prediction is a clean forward that only ever serves as a
    detached target, so by default ``predict`` runs it without a graph (no gradient could flow
    through it) and hands ``(x, logits)`` to ``update``, where the perturbed views are built,
    forwarded with gradients and learnt from.

    ``profile=paper`` reproduces the Tempora reference, which records autograd on the clean
    forward anyway and keeps that unused graph alive until the update is done (a slightly
    larger intrinsic time e and peak memory)."""

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        self._pending = None
        self.last_updated = False
        x = dense_nchw(x)
        if self.paper_profile and not self.frozen:
            # Tempora reference quirk: the clean forward records a graph nothing back-propagates through.
            with torch.enable_grad():
                logits = self.model(x)
            self._pending = (x, logits)
            return logits.detach()
        with torch.no_grad():
            logits = self.model(x)
        if not self.frozen:
            self._pending = (x, logits)
        return logits

    def adapt(self) -> None:
        pending, self._pending = self._pending, None
        if self.frozen or pending is None:
            self.last_updated = False
            return
        x, logits = pending  # (paper profile) holds the clean graph until the update returns
        with torch.enable_grad():
            self.last_updated = bool(self.update(x, logits.detach()))
