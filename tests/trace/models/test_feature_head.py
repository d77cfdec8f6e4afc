"""feature_head: the penultimate features and final linear classifier of every model the tracer
builds, checked by the identity classifier(features(x)) == model(x) on random weights (nothing
downloaded), and refused in one line where a model has no such head."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from tempora_trace.errors import ConfigError
from tempora_trace.models import available_models, feature_head, get_model

#: built-ins that take seconds to build and run on a CPU (ViT-B/16, ResNet-50)
_SLOW_BUILTINS = {"vit_base_patch16_224", "resnet50"}


def _identity_holds(name: str, expect: str) -> None:
    weights = None if name.startswith("demo-") else "random"
    torch.manual_seed(0)
    model, spec = get_model(name, weights, offline=True)
    head = feature_head(model, name)
    assert expect in head.found
    x = torch.rand(2, 3, spec.input_size, spec.input_size)
    with torch.no_grad():
        out = model(x)
        z = head.features(x)
        recomposed = z @ head.weight.T + head.bias
    assert z.dim() == 2 and z.shape[0] == 2 and z.shape[1] == head.weight.shape[1]
    assert head.weight.shape[0] == spec.num_classes
    torch.testing.assert_close(recomposed, out, rtol=1e-5, atol=1e-5)


_BUILTIN_FOUND = {
    "demo-resnet": "demo ResNet",
    "demo-resnet-gn": "demo ResNet",
    "cifar-resnet18": "ResNet: fc",
    "resnet18": "ResNet: fc",
    "resnet50": "ResNet: fc",
    "vit_base_patch16_224": "timm VisionTransformer",
    "mobilenet_v2": "MobileNetV2: classifier[-1]",
    "mobilenet_v3_small": "MobileNetV3: classifier[-1]",
    "resnet50_gn": "timm ResNet",
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW_BUILTINS else n for n in available_models()])
def test_every_builtin_model_recomposes(name: str) -> None:
    assert name in _BUILTIN_FOUND, f"a new built-in model '{name}': say where its head is"
    _identity_holds(name, _BUILTIN_FOUND[name])


@pytest.mark.parametrize(
    ("spec", "expect"),
    [
        ("torchvision:efficientnet_b0", "EfficientNet: classifier[-1]"),
        ("torchvision:densenet121", "DenseNet: classifier"),
        ("timm:mobilenetv3_small_100", "timm MobileNetV3"),
        ("timm:vit_tiny_patch16_224", "timm VisionTransformer"),
    ],
)
def test_library_models_recompose(spec: str, expect: str) -> None:
    _identity_holds(spec, expect)


class _Declared(nn.Module):
    """A model of one's own whose head is declared (and is not its last nn.Linear in module order)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 6), nn.ReLU())
        self.out = nn.Linear(6, 4)
        self.unused_adapter = nn.Linear(4, 4)  # last in module order, never the classifier

    def features_and_classifier(self):
        return self.body, self.out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(x))


def test_a_model_declares_its_head() -> None:
    model = _Declared()
    head = feature_head(model)
    assert head.classifier is model.out and "declared" in head.found
    x = torch.rand(3, 3, 8, 8)
    torch.testing.assert_close(head.logits(head.features(x)), model(x))


def test_a_sequential_ending_in_linear() -> None:
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 5), nn.Tanh(), nn.Linear(5, 3))
    head = feature_head(model)
    x = torch.rand(2, 3, 2, 2)
    assert head.classifier is model[-1]
    torch.testing.assert_close(head.logits(head.features(x)), model(x))


def test_features_stop_before_the_head() -> None:
    """The torchvision path returns what the head receives without computing the head."""
    model, _ = get_model("cifar-resnet18", "random", offline=True)
    head = feature_head(model)
    calls = []
    handle = head.classifier.register_forward_hook(lambda *a: calls.append(1))
    try:
        head.features(torch.rand(1, 3, 32, 32))
    finally:
        handle.remove()
    assert calls == []


class _NoHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x).mean((2, 3))).log_softmax(1)


def test_an_unknown_model_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        feature_head(_NoHead(), "my.py:build")
    message = str(err.value)
    assert "\n" not in message and "'my.py:build'" in message and "features_and_classifier()" in message


def test_a_torchvision_model_without_a_linear_head_is_refused() -> None:
    model, _ = get_model("torchvision:squeezenet1_0", "random", offline=True)
    with pytest.raises(ConfigError, match="no linear classifier"):
        feature_head(model)


def test_a_wrong_declaration_is_refused() -> None:
    class Wrong(_Declared):
        def features_and_classifier(self):
            return self.body, self.body

    with pytest.raises(ConfigError, match="must return"):
        feature_head(Wrong())
