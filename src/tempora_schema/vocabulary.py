"""The words both packages use, each declared once: protocol and budget-rule names, the
baseline method, the corruptions and their categories.

Both the simulator and the tracer import these; a name spelled as a literal elsewhere is a
second declaration that can drift (docs/design/architecture.md lists who owns which rule).
"""

from __future__ import annotations

#: The paper's four protocols (docs/design/design.md §3), in the order tables list them.
PROTOCOLS = ("offline", "discrete", "continuous", "amortised")
#: Two pressures at once (docs/design/design.md §9): opt-in, never part of ``all``.
COMBINED_PROTOCOLS = ("discrete-continuous", "discrete-amortised")
#: The protocols a live run plays against a real clock (``tempora-trace live``).
LIVE_PROTOCOLS = ("discrete", "amortised")
#: Amortised cut-off rules: strict m = max{j: Σc ≤ B} (the paper), overshoot (adapt while spent < B).
BUDGET_RULES = ("strict", "overshoot")
#: The method every group is measured against: no adaptation, its trace gives λ.
BASELINE_METHOD = "standard"
#: ImageNet-C / CIFAR-10-C corruption categories (Hendrycks & Dietterich, 2019, Figure 1).
CORRUPTION_CATEGORIES: dict[str, tuple[str, ...]] = {
    "noise": ("gaussian_noise", "shot_noise", "impulse_noise"),
    "blur": ("defocus_blur", "glass_blur", "motion_blur", "zoom_blur"),
    "weather": ("snow", "frost", "fog", "brightness"),
    "digital": ("contrast", "elastic_transform", "pixelate", "jpeg_compression"),
}
#: The 15 corruptions in their canonical order (the episodes of the paper's episodic stream).
CORRUPTIONS: tuple[str, ...] = tuple(c for names in CORRUPTION_CATEGORIES.values() for c in names)
