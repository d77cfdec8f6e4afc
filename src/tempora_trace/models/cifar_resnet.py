"""The CIFAR ResNet-18: torchvision's ResNet-18 with a 3×3 stride-1 stem for 32×32 inputs.

This is the variant the Tempora reference code evaluates on CIFAR-10-C/CIFAR-100-C (the
layout of huyvnphan/PyTorch_CIFAR10: torchvision module names, ``conv1`` replaced by a 3×3
convolution, max-pool kept). Weight files are plain ``state_dict``s with torchvision key names
(``conv1.weight``, ``layer1.0.bn1.running_mean``, …, ``fc.weight``), so a checkpoint trained
with that recipe loads directly.
"""

from __future__ import annotations

import torch.nn as nn


def build_cifar_resnet18(num_classes: int = 10) -> nn.Module:
    """Randomly initialised CIFAR ResNet-18 (expects normalised 32×32 input)."""
    from torchvision.models import resnet18  # lazy: importing torchvision costs a process about 1.5 s (it loads torch._dynamo)

    net = resnet18(weights=None, num_classes=num_classes)
    net.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    return net
