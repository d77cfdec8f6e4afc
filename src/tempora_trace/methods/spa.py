"""SPA: self-bootstrapping adaptation with structure-preserving weak views.

Niu, S., Chen, G., Chen, P., Chen, Y., Wu, P., Zhao, P., Tan, M. et al. "Self-Bootstrapping for
Versatile Test-Time Adaptation." ICML 2025.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import register
from .augment import DetachedTargetMethod, MethodRNG, PatchNoise, ProjectorView, low_frequency_amplitude_mask
from .base import Departure, MethodContext, MethodError
from .gradient import is_vit, selected


def confident_kl(weak_logits: torch.Tensor, clean_logits: torch.Tensor) -> torch.Tensor:
    """KL(clean ‖ weak) averaged over the samples whose clean view is more confident than the
    weak view (SPA's implicit reliability filter); a constant 0 (no gradient, so no step) when
    no sample qualifies."""
    with torch.no_grad():
        keep = selected(clean_logits.softmax(1).amax(1) > weak_logits.softmax(1).amax(1))
    if keep.numel() == 0:
        return weak_logits.new_zeros(())
    target = clean_logits.index_select(0, keep).softmax(1)
    return F.kl_div(weak_logits.index_select(0, keep).log_softmax(1), target, reduction="batchmean")


@register
class SPA(DetachedTargetMethod):
    """SPA (Niu et al., ICML 2025). Two weak views of each batch, built to preserve geometry:
    (i) random dropping of Fourier amplitudes in the low-frequency square (central 20 % of the
    shifted spectrum), (ii) per-patch Gaussian noise blending whose per-patch strengths are
    trained *adversarially* (gradient ascent, SGD lr 1) and renormalised to a fixed mean noise
    ratio. Each view goes through the model with a projector (identity-initialised d×d linear
    map before the classifier); its prediction is pulled towards the clean view's by KL,
    only on samples where the clean view is more confident. Updated: norm-layer affine
    parameters and the projector (separate learning rates, SGD momentum 0.9).

    Prediction boundary: the clean forward is the prediction and no gradient flows through it
    (its softmax is a detached target), so by default ``predict`` runs it without a graph; both weak views,
    their forwards, backward, the three updates and the noise renormalisation are ``adapt``.

    Compatible models: only those with the authors' settings, i.e. GroupNorm (ResNet-50-GN:
    lr 0.0025, projector lr 0.025, mask 0.1, noise 0.1; used for ``demo-resnet-gn``) and
    LayerNorm (ViT-B/16: lr 0.01, projector lr 0.05, mask 0.2, noise 0.4). Noise patches are 16
    pixels on 224×224 inputs (ViT's patch) and 4 pixels on 32×32 (8×8 grid) inputs.
    """

    name = "spa"
    family = "gradient-based"
    compatible_norms = frozenset({"gn", "ln"})
    paper = "Niu et al., Self-Bootstrapping for Versatile Test-Time Adaptation (SPA), ICML 2025"
    updates = "norm-layer affine parameters + projector head (+ adversarial per-patch noise strengths)"
    overhead = "adapt: two augmented views (Fourier amplitude mask, patch noise), two grad forwards, backward, 3 updates"

    non_negative_options = ("lr", "projector_lr", "momentum", "noise_lr", "noise_momentum")
    fraction_options = ("mask_ratio", "noise_ratio", "low_freq_region")
    positive_int_options = ("noise_patch", "image_size")
    departures = (
        Departure(
            point="patch-noise view",
            default="one vectorised pass: a per-pixel noise-strength map from the per-patch strengths, one noise draw for the image",
            reference="a Python loop over the patches (196 on a 224-px image) with one noise draw "
            "and one autograd-recorded slice assignment each: the same distribution, "
            "about 80x the time of the view on an H100",
            reason="the method's arithmetic without the interpreter overhead, which would otherwise dominate the measured extrinsic time",
        ),
        Departure(
            point="clean forward",
            default="without autograd (it is a detached target)",
            reference="with autograd, the unused graph kept until the update is done",
            reason="no gradient can flow through it; recording one only adds intrinsic time and peak memory",
        ),
    )

    @classmethod
    def default_params(cls, context: MethodContext) -> dict[str, Any]:
        vit = is_vit(context)
        cifar = context.dataset_family == "cifar"
        return {
            "lr": 0.01 if vit else 0.0025,
            "projector_lr": 0.05 if vit else 0.025,
            "momentum": 0.9,
            "mask_ratio": 0.2 if vit else 0.1,
            "noise_ratio": 0.4 if vit else 0.1,
            "low_freq_region": 0.2,
            "noise_lr": 1.0,
            "noise_momentum": 0.9,
            "noise_patch": 4 if cifar else 16,
            "image_size": 32 if cifar else 224,
        }

    def validate(self) -> None:
        if self.params["noise_ratio"] <= 0.0:
            raise MethodError("method 'spa': option noise_ratio must be > 0")

    def prepare(self, model: nn.Module) -> None:
        p = self.params
        self.view = ProjectorView(model)
        try:
            self.noise = PatchNoise(int(p["image_size"]), int(p["noise_patch"]), float(p["noise_ratio"]))
        except ValueError as exc:
            raise MethodError(f"spa: {exc}") from None
        self.noise.to(self.view.projector.weight.device)

    def build_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        # the projector is outside the model and always trainable, with its own learning rate
        p = self.params
        return torch.optim.SGD(
            [{"params": params, "lr": p["lr"]}, {"params": [self.view.projector.weight], "lr": p["projector_lr"]}],
            momentum=p["momentum"],
            foreach=True,
        )

    def __init__(self, model: nn.Module, context: MethodContext, **params: Any):
        super().__init__(model, context, **params)
        p = self.params
        self.trainable = [q for _, q in self.adapted]
        self.noise_optimizer = torch.optim.SGD([self.noise.alpha], lr=p["noise_lr"], momentum=p["noise_momentum"], foreach=True)
        self.rng = MethodRNG()

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        size = int(self.params["image_size"])
        if not self.frozen and tuple(x.shape[-2:]) != (size, size):
            raise MethodError(f"spa was set up for {size}x{size} images (option image_size), got {tuple(x.shape[-2:])}")
        return super().predict(x)

    def update(self, x: torch.Tensor, clean: torch.Tensor) -> bool:
        p = self.params
        gen = self.rng.get(x.device)
        low = low_frequency_amplitude_mask(x, float(p["mask_ratio"]), float(p["low_freq_region"]), gen)
        # Tempora reference: the per-patch Python loop; default: one vectorised pass.
        noisy = self.noise.forward_per_patch(x, gen) if self.paper_profile else self.noise(x, gen)
        with self.view.active():
            loss = confident_kl(self.model(low), clean) + confident_kl(self.model(noisy), clean)
        updated = loss.requires_grad
        if updated:
            loss.backward()
            if self.noise.alpha.grad is not None:
                self.noise.alpha.grad.neg_()  # ascend: make the noise as disruptive as allowed
            self.optimizer.step()
            self.noise_optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.noise_optimizer.zero_grad(set_to_none=True)
        self.noise.renormalise()
        return bool(updated)

    def extra_state(self) -> dict[str, Any]:
        return {
            "projector": self.view.projector.weight.detach().clone(),
            "noise_alpha": self.noise.alpha.detach().clone(),
            "noise_optimizer": self.noise_optimizer.state_dict(),
            "rng": self.rng.state(),
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            self.view.projector.weight.copy_(state["projector"])
            self.noise.alpha.copy_(state["noise_alpha"])
        self.noise_optimizer.load_state_dict(state["noise_optimizer"])
        self.rng.load(state["rng"])


__all__ = ["SPA", "confident_kl"]
