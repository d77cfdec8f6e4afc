"""The demo models: a small CIFAR-style ResNet with BatchNorm (``demo-resnet``) or GroupNorm
(``demo-resnet-gn``), sized so it trains to >= 90 % on the demo set in minutes on a 2-core CPU.

Design choices that the TTA methods rely on:

* input is float CHW in [0, 1]; the per-channel normalisation is the model's first module
  (a buffer, so ``state_dict`` carries it and no caller has to know the statistics);
* every conv is followed by the chosen norm layer, so BN-based methods (Tent, ETA, SAR, ...)
  find one ``BatchNorm2d`` per conv and GN variants find ``GroupNorm`` instead;
* the head is one final ``nn.Linear``; its input (global-average-pooled features) is what
  methods use as penultimate features.
"""

from __future__ import annotations

import torch
import torch.nn as nn

#: Channel widths of the three stages.
DEMO_WIDTHS = (24, 48, 96)
#: The stem conv has stride 2, so the stages run at 16, 8 and 4 pixels: shapes are several
#: pixels wide, and the halved resolution makes CPU training ~2-3x cheaper.
STEM_STRIDE = 2
#: GroupNorm groups (clamped to the channel count).
DEMO_GN_GROUPS = 8
#: Per-channel input normalisation. Demo colours are drawn uniformly in the RGB cube
#: independently of the class, so every channel has mean ~0.5 and std ~0.27 on the clean
#: training split; rounded constants keep the model independent of the data cache.
DEMO_MEAN = (0.5, 0.5, 0.5)
DEMO_STD = (0.25, 0.25, 0.25)


class Normalize(nn.Module):
    """Per-channel ``(x - mean) / std`` with the statistics stored as buffers."""

    def __init__(self, mean=DEMO_MEAN, std=DEMO_STD):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "bn":
        return nn.BatchNorm2d(channels)
    if kind == "gn":
        return nn.GroupNorm(min(DEMO_GN_GROUPS, channels), channels)
    raise ValueError(f"unknown norm {kind!r}: expected 'bn' or 'gn'")


class BasicBlock(nn.Module):
    """Two 3x3 convs with a residual connection (He et al., 2016); 1x1 projection on stride."""

    def __init__(self, cin: int, cout: int, stride: int, norm: str):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = _norm(norm, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = _norm(norm, cout)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), _norm(norm, cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class DemoResNet(nn.Module):
    """Stem conv, three stages of basic blocks (widths ``DEMO_WIDTHS``), GAP, Linear head."""

    def __init__(self, norm: str = "bn", num_classes: int = 10, widths=DEMO_WIDTHS, blocks_per_stage: int = 1):
        super().__init__()
        self.norm_kind = norm
        self.normalize = Normalize()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, STEM_STRIDE, 1, bias=False), _norm(norm, widths[0]), nn.ReLU(inplace=True))
        layers = []
        cin = widths[0]
        for stage, width in enumerate(widths):
            for b in range(blocks_per_stage):
                stride = 2 if (stage > 0 and b == 0) else 1
                layers.append(BasicBlock(cin, width, stride, norm))
                cin = width
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Penultimate (pooled) features, the input of the ``fc`` head."""
        x = self.layers(self.stem(self.normalize(x)))
        return torch.flatten(self.pool(x), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


def build_demo_resnet(norm: str = "bn", num_classes: int = 10) -> nn.Module:
    """The demo ResNet, randomly initialised (load the committed weights on top)."""
    return DemoResNet(norm=norm, num_classes=num_classes)
