"""ETA* (``eta-no-reset``): ETA keeping the source BatchNorm running statistics.

The Tempora paper's Table 16 ablation (ICML 2026, Appendix C.3) of Niu et al., ICML 2022:
identical to ``eta`` except that the source running statistics are the starting point of the
tracked BN buffers instead of being discarded, which is what lets frozen inference survive an
exhausted amortised budget.
"""

from __future__ import annotations

from . import register
from .eta import ETA


@register
class ETANoReset(ETA):
    name = "eta-no-reset"
    compatible_norms = frozenset({"bn"})
    paper = "Tempora (ICML 2026) Table 16 ablation of ETA (Niu et al., ICML 2022): source BN statistics kept"
    updates = "affine parameters of all normalisation layers; BN buffers start from source statistics"
    default_source_stats = "keep"
