"""The penultimate features and the final linear classifier of every model the tracer builds.

Methods that work on features (T3A's prototypes, LAME's affinities, NEO's centring, SHOT's
clustering) need two things: a function ``features(x)`` giving the ``[N, D]`` input of the last
linear layer, and that layer itself (``weight`` ``[C, D]``, ``bias`` ``[C]``), such that
``classifier(features(x))`` is the model's output. :func:`feature_head` finds them:

1. **declared by the model**: a model (a factory's, or the network inside
   :class:`~tempora_trace.models.Normalized`) that defines a method
   ``features_and_classifier()`` returning ``(features_function, final_nn_Linear)`` is taken at
   its word; this is how a model of one's own states its head;
2. **the demo models**: their ``features`` method and ``fc`` layer;
3. **timm models**: ``forward_head(forward_features(x), pre_logits=True)`` and
   ``get_classifier()`` (the ViT-B/16 and ``resnet50_gn`` built-ins, every ``timm:`` spec);
4. **torchvision models**: the last linear layer at ``fc`` (ResNets, CIFAR ResNet-18,
   GoogLeNet, Inception, RegNet, ShuffleNet), ``classifier`` or its last element (MobileNet,
   EfficientNet, ConvNeXt, VGG, DenseNet, MaxViT), ``heads.head`` (ViT) or ``head`` (Swin); the
   features are the input that layer receives, and the forward stops there;
5. **an** ``nn.Sequential`` whose last module is an ``nn.Linear``: everything before it.

Anything else is refused with one line (:class:`~tempora_trace.errors.ConfigError`) saying
how to declare the head; nothing is guessed from "the last ``nn.Linear`` in module order",
which is wrong wherever a network computes after its last linear layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn

from ..errors import ConfigError
from .demo import DemoResNet

#: the method a model defines to declare its own features and classifier.
DECLARATION = "features_and_classifier"
#: where a torchvision classification model keeps its final linear layer, tried in order.
TORCHVISION_HEADS = ("fc", "classifier", "heads", "head")


@dataclass(frozen=True)
class FeatureHead:
    """A model's penultimate features and its final linear classifier.

    ``features(x)`` takes the model's own input (float images in [0, 1]) and returns
    ``[N, D]``; ``classifier`` is the ``nn.Linear`` (``D`` → ``C``) that maps them to the
    logits; ``found`` says how they were found (for messages and the documentation)."""

    features: Callable[[torch.Tensor], torch.Tensor]
    classifier: nn.Linear
    found: str

    @property
    def weight(self) -> torch.Tensor:
        """``[C, D]``: one row per class."""
        return self.classifier.weight

    @property
    def bias(self) -> torch.Tensor | None:
        return self.classifier.bias

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return self.classifier(features)


class _ReachedHead(Exception):
    """Raised by the pre-hook on the classifier: the features are in hand, stop the forward."""


def features_before(model: nn.Module, head: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """``features(x)``: run ``model`` on ``x`` until ``head`` is called and return the input
    ``head`` receives (the head itself is not computed)."""

    def features(x: torch.Tensor) -> torch.Tensor:
        captured: list[torch.Tensor] = []

        def stop(module: nn.Module, args: tuple) -> None:
            captured.append(args[0])
            raise _ReachedHead

        handle = head.register_forward_pre_hook(stop)
        try:
            model(x)
        except _ReachedHead:
            pass
        finally:
            handle.remove()
        if not captured:
            raise ConfigError(f"the model never called its classifier ({type(head).__name__}) on this input")
        return captured[0]

    return features


def _declared(net: nn.Module, prefix: Callable[[torch.Tensor], torch.Tensor] | None) -> FeatureHead | None:
    declare = getattr(net, DECLARATION, None)
    if not callable(declare):
        return None
    try:
        features, classifier = declare()
    except (TypeError, ValueError):
        raise ConfigError(f"{type(net).__name__}.{DECLARATION}() must return (features function, nn.Linear)") from None
    if not callable(features) or not isinstance(classifier, nn.Linear):
        raise ConfigError(
            f"{type(net).__name__}.{DECLARATION}() must return (features function, nn.Linear), "
            f"not ({type(features).__name__}, {type(classifier).__name__})"
        )
    return FeatureHead(_after(prefix, features), classifier, f"declared by {type(net).__name__}.{DECLARATION}()")


def _after(prefix: Callable[[torch.Tensor], torch.Tensor] | None, fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable:
    if prefix is None:
        return fn
    return lambda x: fn(prefix(x))


def _timm(net: nn.Module, prefix: Callable | None) -> FeatureHead | None:
    if not (callable(getattr(net, "forward_features", None)) and callable(getattr(net, "forward_head", None))):
        return None
    get = getattr(net, "get_classifier", None)
    classifier = get() if callable(get) else None
    if not isinstance(classifier, nn.Linear):
        raise ConfigError(
            f"timm model {type(net).__name__} has no linear classifier (get_classifier() gives {type(classifier).__name__}); "
            f"define {DECLARATION}() on a wrapper to name its features and head"
        )

    def features(x: torch.Tensor) -> torch.Tensor:
        return net.forward_head(net.forward_features(x), pre_logits=True)

    return FeatureHead(_after(prefix, features), classifier, f"timm {type(net).__name__}: forward_head(pre_logits=True), get_classifier()")


def _torchvision(outer: nn.Module, net: nn.Module) -> FeatureHead | None:
    if not type(net).__module__.startswith("torchvision.models"):
        return None
    for attr in TORCHVISION_HEADS:
        module = getattr(net, attr, None)
        if isinstance(module, nn.Sequential) and len(module) > 0:
            module, attr = module[-1], f"{attr}[-1]"
        if isinstance(module, nn.Linear):
            return FeatureHead(features_before(outer, module), module, f"torchvision {type(net).__name__}: {attr}")
        if module is not None:
            break
    raise ConfigError(f"torchvision model {type(net).__name__} ends in no linear classifier (it has no features and head to take)")


def feature_head(model: nn.Module, label: str | None = None) -> FeatureHead:
    """The features function and final linear classifier of ``model`` (see the module doc);
    ``label`` names the model in the one-line :class:`ConfigError` raised where none is found."""
    from . import Normalized  # the package imports this module's users; lazy to avoid a cycle

    name = label or type(model).__name__
    found = _declared(model, None)
    if found is not None:
        return found
    net, prefix = model, None
    if isinstance(model, Normalized):
        net = model.net
        prefix = lambda x: (x - model.mean) / model.std  # noqa: E731
        found = _declared(net, prefix)
        if found is not None:
            return found
    if isinstance(net, DemoResNet):
        return FeatureHead(_after(prefix, net.features), net.fc, "demo ResNet: features(), fc")
    found = _timm(net, prefix) or _torchvision(model, net)
    if found is not None:
        return found
    if isinstance(net, nn.Sequential) and len(net) > 1 and isinstance(net[-1], nn.Linear):
        return FeatureHead(_after(prefix, net[:-1]), net[-1], "nn.Sequential: its last module")
    raise ConfigError(
        f"cannot find the features and classifier head of model '{name}': define {DECLARATION}() on it, "
        "returning (a function from images to [N, D] features, the final nn.Linear)"
    )
