"""Hand-built utility tables in the sweep's layout (docs/design/design.md §6: one group, pooled
``__all__`` rows where an analysis reads them), whose answers the analysis and report tests work
out by hand."""

from __future__ import annotations

import polars as pl

GROUP = {"dataset": "demo", "model": "demo-resnet", "device": "cpu:test", "batch_size": 64, "seed": 0, "stream": "episodic"}
DECOMP = ("alpha", "served", "served_acc", "acc", "kappa", "cov", "m", "beta", "acc_adapt", "acc_frozen", "frozen_gap")
PARAM = {"offline": None, "discrete": "rho", "continuous": "T_ms", "amortised": "B_ms"}


def utility_frame(rows: list[dict], lambda_ms: float = 10.0) -> pl.DataFrame:
    """Rows of (method, episode, protocol, value, utility, decomposition...) → a §6 table."""
    full = []
    for r in rows:
        d = {
            **GROUP,
            "method": r["method"],
            "episode": r["episode"],
            "protocol": r["protocol"],
            "param": PARAM[r["protocol"]],
            "value": r.get("value"),
            "lambda_ms": lambda_ms,
            "utility": r["utility"],
        }
        d.update({k: r.get(k) for k in DECOMP})
        full.append(d)
    schema = {
        **{k: pl.String for k in ("dataset", "model", "device", "stream", "method", "episode", "protocol", "param")},
        "batch_size": pl.Int64,
        "seed": pl.Int64,
        "value": pl.Float64,
        "lambda_ms": pl.Float64,
        "utility": pl.Float64,
        **{k: pl.Float64 for k in DECOMP},
    }
    schema["served"] = pl.Int64
    schema["m"] = pl.Int64
    schema["frozen_gap"] = pl.Int64
    return pl.DataFrame(full, schema=schema)


def grid(table: dict[tuple[str, str, float | None], dict[str, float]]) -> list[dict]:
    """{(episode, protocol, value): {method: utility}} → rows."""
    return [
        {"method": m, "episode": ep, "protocol": proto, "value": v, "utility": u}
        for (ep, proto, v), per in table.items()
        for m, u in per.items()
    ]


# Two episodes, three methods; offline + ρ ∈ {1.0, 0.5} + T = 50 ms. Hand-chosen winners:
#   fog:  offline slow, ρ=1 fast, ρ=0.5 tie(fast, slow), T=50 standard
#   snow: offline slow, ρ=1 fast, ρ=0.5 slow,            T=50 fast
WIN = {
    ("fog", "offline", None): {"standard": 0.20, "fast": 0.30, "slow": 0.50},
    ("fog", "discrete", 1.0): {"standard": 0.20, "fast": 0.28, "slow": 0.10},
    ("fog", "discrete", 0.5): {"standard": 0.20, "fast": 0.30, "slow": 0.30},
    ("fog", "continuous", 50.0): {"standard": 0.20, "fast": 0.19, "slow": 0.05},
    ("snow", "offline", None): {"standard": 0.40, "fast": 0.45, "slow": 0.60},
    ("snow", "discrete", 1.0): {"standard": 0.40, "fast": 0.44, "slow": 0.20},
    ("snow", "discrete", 0.5): {"standard": 0.40, "fast": 0.45, "slow": 0.55},
    ("snow", "continuous", 50.0): {"standard": 0.40, "fast": 0.42, "slow": 0.10},
}
