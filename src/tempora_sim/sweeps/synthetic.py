"""Synthetic schema-v2 traces with realistic per-method timing profiles (no torch).

Tests, benches and notebooks need traces without a GPU or a dataset. The profiles below are
shaped after the ResNet-50 / RTX 4080 measurements of the Tempora paper (Table 2: mean e and ℓ
per method, Table 10: mean offline accuracy, Table 5: frozen accuracy after a short budget), so
sweeps over them exercise the same regimes as real traces (gradient-free methods at ≈ λ,
gradient-based ones at 2.4–4.9 × λ, most collapsing when frozen early, SHOT-IM surviving).
They are *synthetic*: numbers drawn from these profiles, never measurements.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tempora_schema import (
    CORRUPTIONS,
    METADATA_FIELDS_V1,
    NO_CHECKPOINT,
    PHASE_ADAPT,
    PHASE_FROZEN,
    PROBE_NOT_MEASURED,
    SCHEMA_VERSION,
    VARIABILITY_KEY,
    WEIGHTS_RANDOM,
    arrow_schema,
    map_sample_events,
)
from tempora_schema.discrete import last_arrival, next_pick
from tempora_schema.live import LIVE_COLUMNS, LIVE_METADATA_KEY, LIVE_SCHEMA_VERSION, SHARED_FIELDS, live_arrow_schema


@dataclass(frozen=True)
class MethodProfile:
    """Timing and accuracy profile of one method (ms; accuracies are fractions)."""

    e_ms: float
    l_ms: float
    e_std: float
    l_std: float
    acc: float
    updates: bool = True
    #: Frozen accuracy after m steps: ``collapse`` below ``mature_steps``, ``acc`` above.
    frozen_collapse: float | None = None
    mature_steps: int = 0


#: Paper Table 2 (timing) and Table 10 mean accuracy; frozen behaviour after Table 5.
PROFILES: dict[str, MethodProfile] = {
    "standard": MethodProfile(38.67, 0.0, 0.2, 0.0, 0.1816, updates=False),
    "neo": MethodProfile(38.7, 0.05, 0.2, 0.01, 0.2214),
    "lame": MethodProfile(40.2, 0.05, 0.8, 0.01, 0.1740, updates=False),
    "adabn": MethodProfile(41.0, 0.1, 0.3, 0.02, 0.3172),
    "tent": MethodProfile(41.1, 56.1, 0.4, 1.5, 0.4288, frozen_collapse=0.001, mature_steps=150),
    "eta": MethodProfile(41.1, 56.6, 0.4, 1.5, 0.4835, frozen_collapse=0.001, mature_steps=150),
    "shot-im": MethodProfile(41.1, 79.8, 0.4, 2.0, 0.4243),
    "deyo": MethodProfile(41.1, 88.6, 0.4, 3.0, 0.4876, frozen_collapse=0.001, mature_steps=120),
    "cmf": MethodProfile(41.1, 119.0, 0.4, 3.5, 0.4913, frozen_collapse=0.001, mature_steps=100),
    "sar": MethodProfile(41.1, 154.1, 0.4, 3.8, 0.4414, frozen_collapse=0.001, mature_steps=250),
}

#: Checkpoints (adaptation steps before freezing) the synthetic tracer evaluates.
DEFAULT_CHECKPOINTS = (0, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class SyntheticVariability:
    """A known timing-variability model, for synthetic ``timing_variability`` measurements.

    A repeat pass scales every sample event's main-pass δ by ``exp(s + ε)`` with a pass shift
    ``s ~ N(0, pass_sd)`` and event noise ``ε ~ N(0, event_sd)`` (log scale); in the idle pass
    every other event waits ``gaps_ms`` (cycling) and is also scaled by ``idle_factor[gap]``.
    The sample is the first ``per_episode`` steps of the first ``episodes`` episodes."""

    pass_sd: float = 0.05
    event_sd: float = 0.02
    passes: int = 2
    per_episode: int = 4
    episodes: int = 4
    gaps_ms: tuple[float, ...] = (20.0, 80.0)
    idle_factor: tuple[float, ...] = (1.0, 1.0)

    def measurement(self, main: dict, episodes: Sequence[str], rng: np.random.Generator) -> dict:
        sample = [{"episode": ep, "steps": list(range(min(self.per_episode, len(main[ep]))))} for ep in list(episodes)[: self.episodes]]
        base = np.concatenate([main[item["episode"]][: len(item["steps"])] for item in sample])

        def one_pass(extra: np.ndarray) -> list[float]:
            s = rng.normal(0.0, self.pass_sd) if self.pass_sd else 0.0
            eps = rng.normal(0.0, self.event_sd, base.size) if self.event_sd else np.zeros(base.size)
            return [float(max(x, 1e-6)) for x in base * np.exp(s + eps) * extra]

        passes = [one_pass(np.ones(base.size)) for _ in range(self.passes)]
        gaps = [0.0 if i % 2 == 0 else float(self.gaps_ms[(i // 2) % len(self.gaps_ms)]) for i in range(base.size)] if self.gaps_ms else []
        factor = dict(zip(self.gaps_ms, self.idle_factor))
        idle = one_pass(np.array([factor.get(g, 1.0) for g in gaps])) if gaps else []
        return {"sample": sample, "passes_ms": passes, "idle_gaps_ms": gaps, "idle_ms": idle, "seconds": 0.0}


def frozen_accuracy(profile: MethodProfile, m: int) -> float:
    """Accuracy of the model frozen after ``m`` steps under ``profile``."""
    if profile.frozen_collapse is None or m >= profile.mature_steps:
        return profile.acc
    return profile.frozen_collapse


def make_trace(
    method: str = "tent",
    *,
    episodes: Sequence[str] = CORRUPTIONS[:3],
    num_batches: int = 100,
    batch_size: int = 64,
    num_classes: int = 1000,
    seed: int = 2025,
    rng_seed: int | None = None,
    dataset: str = "synthetic-imagenet-c",
    model: str = "resnet50",
    device: str = "cpu:synthetic",
    stream: str = "episodic",
    checkpoints: Iterable[int] | None = DEFAULT_CHECKPOINTS,
    frozen_eval: int | str = 16,
    profile: MethodProfile | None = None,
    time_scale: float = 1.0,
    severity: int | None = 5,
    threads: int = 1,
    weights: str = WEIGHTS_RANDOM,
    max_batches: int | None = None,
    probe_ms: float | None = None,
    schema_version: int = SCHEMA_VERSION,
    variability: "SyntheticVariability | None" = None,
) -> tuple[dict, pa.Table]:
    """Return ``(metadata, table)`` of one synthetic trace of ``method``.

    Per batch: ``correct ~ Binomial(batch_size, acc)``, ``e ~ N(e_ms, e_std)`` and
    ``ℓ ~ N(l_ms, l_std)`` clipped at 0, times multiplied by ``time_scale``. Frozen rows are
    written for each checkpoint ``m < num_batches`` on ``frozen_eval`` evenly spaced steps in
    ``[m, N-1]`` (always including ``N-1``), or all of them when ``frozen_eval == "all"``;
    ``checkpoints=None`` writes none. ``rng_seed`` defaults to a hash of method and seed so
    every method of a group gets different draws.

    v2 identity: ``severity`` (also the rows' severity), ``threads``, ``weights``,
    ``max_batches``; the domains are the episodes. ``probe_ms``: write a machine-speed probe
    (at each episode start and every 50 steps, ``probe_ms`` ± 1 %, kind ``"synthetic"``);
    ``None`` writes none. ``schema_version=1`` writes a v1 file (v1 metadata keys only).
    ``variability``: write a ``timing_variability`` measurement drawn from that model
    (:class:`SyntheticVariability`).
    """
    prof = profile or PROFILES[method]
    if rng_seed is None:
        rng_seed = (sum(map(ord, method)) * 7919 + seed) % (2**32)
    rng = np.random.default_rng(rng_seed)
    chunks: list[dict[str, np.ndarray]] = []

    def add(ep, phase, ck, steps, correct, e, l):
        k = len(steps)
        chunks.append(
            {
                "episode": np.full(k, ep, dtype=object),
                "phase": np.full(k, phase, dtype=object),
                "checkpoint": np.full(k, ck, dtype=np.int32),
                "step": np.asarray(steps, dtype=np.int32),
                "correct": np.asarray(correct, dtype=np.int32),
                "e_ms": np.asarray(e, dtype=np.float64),
                "l_ms": np.asarray(l, dtype=np.float64),
                "updated": np.full(k, bool(prof.updates and phase == PHASE_ADAPT)),
            }
        )

    for ep in episodes:
        e = np.clip(rng.normal(prof.e_ms, prof.e_std, num_batches), 0.0, None) * time_scale
        l = np.clip(rng.normal(prof.l_ms, prof.l_std, num_batches), 0.0, None) * time_scale
        correct = rng.binomial(batch_size, prof.acc, num_batches)
        add(ep, PHASE_ADAPT, NO_CHECKPOINT, np.arange(num_batches), correct, e, l)
        for m in sorted(set(checkpoints or ())):
            if m >= num_batches:
                continue
            if frozen_eval == "all":
                steps = np.arange(m, num_batches)
            else:
                steps = np.unique(np.linspace(m, num_batches - 1, max(1, int(frozen_eval))).round().astype(int))
            acc = frozen_accuracy(prof, m)
            fc = rng.binomial(batch_size, acc, steps.size)
            fe = np.clip(rng.normal(prof.e_ms, prof.e_std, steps.size), 0.0, None) * time_scale
            add(ep, PHASE_FROZEN, int(m), steps, fc, fe, np.zeros(steps.size))

    meta = {
        "schema_version": SCHEMA_VERSION,
        "method": method,
        "method_params": {"synthetic": True},
        "model": model,
        "dataset": dataset,
        "stream": stream,
        "batch_size": batch_size,
        "seed": seed,
        "num_classes": num_classes,
        "device": device,
        "torch_version": "none",
        "tracer_version": "synthetic",
        "warmup_batches": 5,
        "frozen_eval": frozen_eval if checkpoints is not None else 0,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "severity": severity,
        "domains": list(dict.fromkeys(episodes)),
        "max_batches": max_batches,
        "weights": weights,
        "threads": threads,
        "speed_probe": [],
        "speed_probe_kind": PROBE_NOT_MEASURED,
    }
    if probe_ms is not None:
        meta["speed_probe_kind"] = "synthetic"
        meta["speed_probe"] = [
            {"episode": ep, "step": int(k), "ms": float(probe_ms * (1.0 + 0.01 * rng.standard_normal()))}
            for ep in episodes
            for k in range(0, num_batches, 50)
        ]
    if variability is not None:
        adapt = [c for c in chunks if c["phase"][0] == PHASE_ADAPT]
        main = {c["episode"][0]: c["e_ms"] + c["l_ms"] for c in adapt}
        meta[VARIABILITY_KEY] = variability.measurement(main, list(dict.fromkeys(episodes)), rng)
    if schema_version == 1:
        meta = {k: meta[k] for k in METADATA_FIELDS_V1}
        meta["schema_version"] = 1
    cat = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
    rows = len(cat["step"])
    data = {
        "episode": pa.array(cat["episode"], pa.string()),
        "domain": pa.array(cat["episode"], pa.string()),
        "severity": pa.array(np.full(rows, severity, dtype=np.int8)) if severity is not None else pa.nulls(rows, pa.int8()),
        "phase": pa.array(cat["phase"], pa.string()),
        "checkpoint": pa.array(cat["checkpoint"]),
        "step": pa.array(cat["step"]),
        "n": pa.array(np.full(rows, batch_size, dtype=np.int32)),
        "correct": pa.array(cat["correct"]),
        "e_ms": pa.array(cat["e_ms"]),
        "l_ms": pa.array(cat["l_ms"]),
        "delta_ms": pa.array(cat["e_ms"] + cat["l_ms"]),
        "updated": pa.array(cat["updated"]),
        "peak_mem_bytes": pa.nulls(rows, pa.int64()),
    }
    table = pa.Table.from_pydict(data, schema=arrow_schema(meta))
    return meta, table


def write_trace(path: str | Path, method: str = "tent", **kwargs) -> Path:
    """Write :func:`make_trace` output to ``path`` (a ``.parquet`` file); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _, table = make_trace(method, **kwargs)
    pq.write_table(table, path)
    return path


def write_trace_set(directory: str | Path, methods: Sequence[str] = tuple(PROFILES), **kwargs) -> list[Path]:
    """Write one trace per method into ``directory`` (one comparison group)."""
    directory = Path(directory)
    return [write_trace(directory / f"{m}.parquet", m, **kwargs) for m in methods]


def make_live(
    trace_meta: dict,
    trace_table: pa.Table,
    rho: float,
    factors: Sequence[np.ndarray],
    queue: int = 1,
    lambda_ms: float | None = None,
) -> tuple[dict, pa.Table]:
    """A synthetic live-run file (live schema v1) of a trace's setting: one discrete run per
    entry of ``factors``, each replaying the trace's adapt rows with every event's times
    multiplied by that run's per-batch factors (all episodes' batches in trace order) at
    ρ = λ/γ with a buffered queue of ``queue`` ≥ 1, by the replay's own rules (event j is step-indexed: it
    takes row j's times and counts). ``lambda_ms`` defaults to mean + 6σ of the trace's own δ.
    What a live run of a device whose times vary like ``factors`` would record; for tests of
    ``tempora-sim validate``."""
    if queue < 1:
        raise ValueError("make_live replays a buffered queue (queue >= 1)")

    d = trace_table.to_pydict()
    adapt = [i for i, p in enumerate(d["phase"]) if p == PHASE_ADAPT]
    episodes = list(dict.fromkeys(d["episode"][i] for i in adapt))
    delta_all = np.array([d["delta_ms"][i] for i in adapt])
    lam = float(lambda_ms) if lambda_ms is not None else float(delta_all.mean() + 6 * delta_all.std())
    gamma = lam / rho
    cols: dict[str, list] = {k: [] for k in LIVE_COLUMNS}
    runs = []
    for r, f in enumerate(factors):
        runs.append({"run": r, "protocol": "discrete", "repeat": r, "rho": rho, "gamma_ms": gamma, "queue": int(queue)})
        offset = 0
        for ep in episodes:
            idx = [i for i in adapt if d["episode"][i] == ep]
            n = len(idx)
            e = np.array([d["e_ms"][i] for i in idx]) * f[offset : offset + n]
            l_ = np.array([d["l_ms"][i] for i in idx]) * f[offset : offset + n]
            offset += n
            served: dict[int, tuple] = {}
            p, j, start = 0, 0, 0.0
            while True:  # the replay's buffered walk (tempora_schema.discrete.next_pick), on these times
                free = start + e[j] + l_[j]
                served[p] = (j, start, start + e[j], free)
                j += 1
                p, start = next_pick(p, last_arrival(free, gamma, 1.0 / gamma), free, gamma, queue, False, n)
                if p >= n:
                    break
            for step in range(n):
                ev = served.get(step)
                cols["run"].append(r)
                cols["episode"].append(ep)
                cols["domain"].append(ep)
                cols["severity"].append(d["severity"][idx[step]])
                cols["step"].append(step)
                cols["n"].append(d["n"][idx[step]])
                cols["served"].append(ev is not None)
                cols["event"].append(ev[0] if ev else -1)
                cols["mode"].append("adapt" if ev else "skipped")
                cols["correct"].append(d["correct"][idx[ev[0]]] if ev else None)
                cols["arrival_ms"].append(step * gamma)
                cols["pickup_ms"].append(ev[1] if ev else None)
                cols["predict_ms"].append(ev[2] if ev else None)
                cols["free_ms"].append(ev[3] if ev else None)
                cols["e_ms"].append(float(e[ev[0]]) if ev else None)
                cols["l_ms"].append(float(l_[ev[0]]) if ev else None)
                cols["delta_ms"].append(float(e[ev[0]] + l_[ev[0]]) if ev else None)
                cols["charged_ms"].append(None)
                cols["spent_ms"].append(None)
                cols["peak_mem_bytes"].append(None)
    meta = {
        "live_schema_version": LIVE_SCHEMA_VERSION,
        **{k: trace_meta[k] for k in SHARED_FIELDS},
        "lambda_ms": lam,
        "lambda_source": "synthetic",
        "clock": "synthetic",
        "clock_resolution_ns": 1.0,
        "spin_us": 0.0,
        "runs": runs,
    }
    schema = live_arrow_schema(meta)
    table = pa.Table.from_pydict({k: pa.array(v, LIVE_COLUMNS[k]) for k, v in cols.items()}, schema=schema)
    assert LIVE_METADATA_KEY.encode() in (table.schema.metadata or {})
    return meta, table


def on_device(
    meta: dict,
    table: pa.Table,
    device: str,
    *,
    threads: int | None = None,
    e_factor: float = 1.0,
    l_factor: float = 1.0,
    noise_sd: float = 0.0,
    rng_seed: int = 0,
    probe_factor: float | None = None,
) -> tuple[dict, pa.Table]:
    """The same trace as measured on another device whose phases take ``e_factor`` and
    ``l_factor`` times as long, each event's time also scaled by ``exp(N(0, noise_sd))``
    (accuracy and checkpoints unchanged): the target of a synthetic prediction, with known
    factors. ``probe_factor`` scales the speed probes (default: ``e_factor``)."""
    rng = np.random.default_rng(rng_seed)
    d = table.to_pydict()
    n = len(d["step"])
    noise = np.exp(rng.normal(0.0, noise_sd, n)) if noise_sd else np.ones(n)
    e = np.asarray(d["e_ms"], np.float64) * e_factor * noise
    l = np.asarray(d["l_ms"], np.float64) * l_factor * noise
    out = dict(meta, device=device, threads=meta["threads"] if threads is None else threads)
    pf = e_factor if probe_factor is None else probe_factor
    out["speed_probe"] = [dict(p, ms=float(p["ms"] * pf)) for p in meta.get("speed_probe", [])]
    if VARIABILITY_KEY in meta:  # the repeat passes keep their ratios to the (new) main pass
        tv = meta[VARIABILITY_KEY]
        old = np.asarray(d["delta_ms"], np.float64)
        ratio = {
            (ep, s): (e[i] + l[i]) / old[i] if old[i] > 0 else 1.0
            for i, (ep, s, p) in enumerate(zip(d["episode"], d["step"], d["phase"]))
            if p == PHASE_ADAPT
        }
        f = [ratio.get((item["episode"], s), 1.0) for item in tv["sample"] for s in item["steps"]]
        out[VARIABILITY_KEY] = map_sample_events(tv, lambda times: [t * x for t, x in zip(times, f)])
    cols = dict(d, e_ms=e, l_ms=l, delta_ms=e + l)
    return out, pa.Table.from_pydict(cols, schema=arrow_schema(out))


def profile_of(meta: dict, table: pa.Table, batches: int) -> tuple[dict, pa.Table]:
    """A profile (``tempora-trace profile``) of a trace: its first ``batches`` adapt rows of
    every episode, no frozen rows, the metadata of a profile; the speed probes and the
    timing-variability sample kept where they fall inside it."""
    d = table.to_pydict()
    keep = [i for i, (p, s) in enumerate(zip(d["phase"], d["step"])) if p == PHASE_ADAPT and s < batches]
    cols = {k: [v[i] for i in keep] for k, v in d.items()}
    out = dict(meta, frozen_eval=0, kind="profile", profile_batches=int(batches))
    out["speed_probe"] = [p for p in meta.get("speed_probe", []) if p["step"] < batches]
    if not out["speed_probe"]:
        out["speed_probe_kind"] = PROBE_NOT_MEASURED
    tv = meta.get(VARIABILITY_KEY)
    if tv is not None:
        flat = [(item["episode"], s) for item in tv["sample"] for s in item["steps"]]
        inside = [s < batches for _, s in flat]
        sample = [{"episode": it["episode"], "steps": [s for s in it["steps"] if s < batches]} for it in tv["sample"]]
        sample = [it for it in sample if it["steps"]]
        if sample:
            pick = lambda xs: [x for x, ok in zip(xs, inside) if ok]  # noqa: E731
            out[VARIABILITY_KEY] = dict(map_sample_events(tv, pick, gaps=pick), sample=sample)
        else:
            out.pop(VARIABILITY_KEY)
    return out, pa.Table.from_pydict(cols, schema=arrow_schema(out))


def write_table(path: str | Path, table: pa.Table) -> Path:
    """Write a (meta-carrying) trace table to ``path``; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path
