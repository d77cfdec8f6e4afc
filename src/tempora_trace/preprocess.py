"""How an image file becomes a model's input: a leaf module, so the model registry (which
says how) and the folder datasets (which decode) both read it and neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Preprocess:
    """How an image file becomes the model's input: resize the shorter side to ``resize``
    (``interpolation``), centre-crop ``input_size``, scale to [0, 1]. ``mean``/``std`` are
    what the model normalises with internally (None: the model takes [0, 1] as it is)."""

    input_size: int
    resize: int
    interpolation: str = "bilinear"
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    def transform(self):
        from torchvision import transforms as T  # lazy: importing torchvision costs a process about 1.5 s (it loads torch._dynamo)

        mode = T.InterpolationMode(self.interpolation)
        return T.Compose([T.Resize(self.resize, interpolation=mode), T.CenterCrop(self.input_size), T.ToTensor()])

    def as_metadata(self) -> dict[str, Any]:
        return {
            "input_size": self.input_size,
            "resize": self.resize,
            "interpolation": self.interpolation,
            "mean": None if self.mean is None else [float(v) for v in self.mean],
            "std": None if self.std is None else [float(v) for v in self.std],
        }


def default_preprocess(input_size: int, family: str) -> Preprocess:
    """A built-in model's preprocessing for image files: a 32 px CIFAR model gets the image
    resized to its side; an ImageNet model the standard resize-256 / centre-crop-224."""
    if family == "cifar":
        return Preprocess(input_size, input_size, "bilinear")
    return Preprocess(input_size, round(input_size * 256 / 224), "bilinear")
