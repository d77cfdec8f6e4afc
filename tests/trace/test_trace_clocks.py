"""Honest clocks: nothing but the method runs inside a timed event.

The loader here does real work (decoding plus a pure-numpy filter, several ms per batch) on
more than zero workers, and every decode and every timed event is stamped with
``time.perf_counter_ns``; no decode interval may intersect any event interval, for adapt and
frozen-checkpoint rows alike. Also: the collector never runs inside an event, staging keeps
order and its memory cap, and the machine-speed probe lands where it should.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

import tempora_schema as schema
from helpers.cifar import tiny_config
from tempora_trace import runner as runner_mod
from tempora_trace.config import TraceConfig
from tempora_trace.data import get_dataset
from tempora_trace.data.cifar import ArraySource
from tempora_trace.data.streams import Episode, batch_order
from tempora_trace.errors import ConfigError
from tempora_trace.runner import trace_run
from tempora_trace.staging import BatchStager, stage_batches

pytestmark = pytest.mark.usefixtures("tiny_models")


def _cfg(root, out, **kw) -> TraceConfig:
    return tiny_config(root, out, **{"workers": 2, **kw})


class _Recorder:
    """Intervals of loading (any thread) and of timed events (the tracer's thread)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.loads: list[tuple[int, int]] = []
        self.events: list[tuple[int, int, bool]] = []


@pytest.fixture
def recorder(monkeypatch):
    rec = _Recorder()
    original_get_batch = ArraySource.get_batch
    original_event = runner_mod.timed_event

    def slow_get_batch(self, indices):
        t0 = time.perf_counter_ns()
        x, y = original_get_batch(self, indices)
        img = x.numpy()
        for _ in range(6):  # real work: a separable blur in numpy, a few ms per batch
            img = (img + np.roll(img, 1, axis=2) + np.roll(img, 1, axis=3)) / 3.0
        x = torch.from_numpy(np.ascontiguousarray(img, dtype=np.float32))
        with rec.lock:
            rec.loads.append((t0, time.perf_counter_ns()))
        return x, y

    def recorded_event(method, x, clock, adapt=True, **options):
        t0 = time.perf_counter_ns()
        ev = original_event(method, x, clock, adapt=adapt, **options)
        rec.events.append((t0, time.perf_counter_ns(), adapt))
        return ev

    monkeypatch.setattr(ArraySource, "get_batch", slow_get_batch)
    monkeypatch.setattr(runner_mod, "timed_event", recorded_event)
    return rec


def _overlaps(loads, events):
    return [(l0, l1, e0, e1, adapt) for (l0, l1) in loads for (e0, e1, adapt) in events if l0 < e1 and e0 < l1]


@pytest.fixture
def longer_root(tmp_path):
    """12 batches of 8 per domain: longer than any read-ahead a loader might keep."""
    from helpers.cifar import write_cifar_c

    return write_cifar_c(tmp_path / "longer", ["gaussian_noise", "fog"], per_severity=96)


@pytest.mark.parametrize("stage_mb", [1024.0, 0.05])
def test_no_loading_overlaps_a_timed_event(longer_root, tmp_path, recorder, stage_mb):
    """Adapt and frozen events with 2 decode workers; 0.05 MiB forces chunks of 2 batches,
    so staging happens between events many times per episode."""
    trace_run(_cfg(longer_root, tmp_path, stage_mb=stage_mb, frozen_sample=3))
    adapt = [e for e in recorder.events if e[2]]
    frozen = [e for e in recorder.events if not e[2]]
    assert len(adapt) >= 24 + 5 and len(frozen) >= 24  # 2 episodes × 12 steps + 5 warm-up; 12 checkpoints each
    assert len(recorder.loads) >= 24
    assert _overlaps(recorder.loads, recorder.events) == []


def test_frozen_evaluations_reuse_the_chunk_in_memory(longer_root, tmp_path, recorder):
    """With each episode in one staged chunk, frozen evaluations decode nothing more: every
    batch is loaded once, plus the warm-up's (rows equal a run staged batch by batch:
    test_rows_do_not_depend_on_chunking_or_workers)."""
    # timing_sample=0: the timing-variability passes after the main pass stage their own batches
    trace_run(_cfg(longer_root, tmp_path, stage_mb=1024.0, frozen_sample=3, timing_sample=0))
    assert len([e for e in recorder.events if not e[2]]) >= 24  # frozen events did run
    assert len(recorder.loads) == 2 * 12 + 1


def test_no_loading_overlaps_budget_checkpoint_events(longer_root, tmp_path, recorder):
    """Budget cut-off checkpoints evaluated online (from a pre-step snapshot) stage their own
    batches too, never beside an event."""
    trace_run(
        _cfg(
            longer_root,
            tmp_path,
            domains=["fog"],
            default_checkpoints=False,
            budgets_ms=[0.0, 1.5, 4.0],
            lambda_ms=0.01,
            frozen_sample=3,
            stage_mb=0.05,
        )
    )
    assert any(not adapt for *_, adapt in recorder.events)
    assert _overlaps(recorder.loads, recorder.events) == []


def test_the_collector_never_runs_inside_an_event(cifar_c_root, tmp_path, monkeypatch):
    """gc callbacks fire on every collection; none may fall inside an event. The collector's
    enabled state is restored after the run."""
    starts: list[int] = []
    inside = {"now": False, "hits": 0}
    original_event = runner_mod.timed_event

    def recorded_event(method, x, clock, adapt=True, **options):
        inside["now"] = True
        try:
            return original_event(method, x, clock, adapt=adapt, **options)
        finally:
            inside["now"] = False

    def on_gc(phase, info):
        if phase == "start":
            starts.append(info["generation"])
            if inside["now"]:
                inside["hits"] += 1

    monkeypatch.setattr(runner_mod, "timed_event", recorded_event)
    gc.callbacks.append(on_gc)
    threshold = gc.get_threshold()
    gc.set_threshold(1)  # with the collector enabled, every allocation would trigger one
    try:
        assert gc.isenabled()
        trace_run(_cfg(cifar_c_root, tmp_path, domains=["fog"]))
        assert gc.isenabled()
    finally:
        gc.callbacks.remove(on_gc)
        gc.set_threshold(*threshold)
    assert inside["hits"] == 0
    assert starts, "the runner collects between events"


def test_rows_do_not_depend_on_chunking_or_workers(cifar_c_root, tmp_path):
    cols = ("phase", "episode", "checkpoint", "step", "n", "correct", "updated")

    def rows(**kw):
        d = pq.read_table(trace_run(_cfg(cifar_c_root, tmp_path / str(len(kw)) / repr(sorted(kw.items())), **kw))).to_pydict()
        return sorted(zip(*(d[c] for c in cols)))

    reference = rows(workers=0)
    assert rows(workers=2, stage_mb=0.03) == reference  # one batch per chunk
    assert rows(workers=3, stage_mb=0.07) == reference  # chunks of 3 over 4 steps: a partial last chunk


def test_the_untimed_warm_up_forward_changes_no_row(cifar_c_root, tmp_path, monkeypatch):
    """With a warm-up forward before every chunk (threshold 0 s, chunks of one batch) the
    rows — adapt and frozen, accuracy included — equal those of a run that never warms up."""
    cols = ("phase", "episode", "checkpoint", "step", "n", "correct", "updated")
    calls = []
    original = runner_mod.TraceRun._rewarm

    def counted(self, x):
        calls.append(self.method.frozen)
        return original(self, x)

    monkeypatch.setattr(runner_mod.TraceRun, "_rewarm", counted)
    results = {}
    for label, threshold in (("never", float("inf")), ("always", 0.0)):
        monkeypatch.setattr(runner_mod, "REWARM_AFTER_S", threshold)
        d = pq.read_table(trace_run(_cfg(cifar_c_root, tmp_path / label, stage_mb=0.03, frozen_sample=None))).to_pydict()
        results[label] = sorted(zip(*(d[c] for c in cols)))
    assert results["always"] == results["never"]
    assert True in calls and False in calls  # inside frozen evaluations and on the adapt stream


def test_stager_keeps_order_and_its_memory_cap(cifar_c_root):
    source = get_dataset("cifar10-c").open("fog", 5, cifar_c_root).source
    order = batch_order(len(source), 2, 2025, "fog")  # 16 batches of 2 images
    episode = Episode("fog", [get_dataset("cifar10-c").open("fog", 5, cifar_c_root)], [order])
    per_batch = 2 * 3 * 32 * 32 * 4 + 2 * 8
    with BatchStager(workers=3, stage_mb=5 * per_batch / 2**20) as stager:
        chunks = [[b.step for b in chunk] for chunk in stager.chunks(episode, range(16))]
    assert chunks == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14], [15]]
    staged = stage_batches(episode, [3, 1, 2], workers=2)
    for b in staged:
        x, y = source.get_batch(order[b.step])
        assert torch.equal(b.x, x) and torch.equal(b.y, y)
    assert [b.step for b in staged] == [3, 1, 2]


def test_stager_returns_only_when_every_decode_has_finished(cifar_c_root):
    episode = Episode("fog", [get_dataset("cifar10-c").open("fog", 5, cifar_c_root)], [batch_order(32, 8, 2025, "fog")])
    active = {"n": 0, "max_after": 0}
    lock = threading.Lock()

    class Slow:
        def __len__(self):
            return 32

        def get_batch(self, indices):
            with lock:
                active["n"] += 1
            time.sleep(0.01)
            with lock:
                active["n"] -= 1
            return torch.zeros(len(indices), 3, 4, 4), torch.zeros(len(indices), dtype=torch.long)

    episode.domains[0].source = Slow()
    with BatchStager(workers=4) as stager:
        for chunk in stager.chunks(episode, range(4)):
            assert active["n"] == 0 and len(chunk) == 4


def test_stage_mb_is_checked(cifar_c_root, tmp_path):
    with pytest.raises(ConfigError, match="--stage-mb"):
        _cfg(cifar_c_root, tmp_path, stage_mb=0).resolved()


def test_speed_probe_runs_every_50_steps_and_survives_resume(cifar_c_root, tmp_path):
    """110 steps in one episode: probes before steps 0, 50, 100; a resumed run keeps the probes
    of the episodes it did not re-run."""
    from helpers.cifar import write_cifar_c

    root = write_cifar_c(tmp_path / "big", ["fog", "snow"], per_severity=220)
    cfg = _cfg(root, tmp_path / "o", batch_size=2, domains=["fog", "snow"], default_checkpoints=False)

    class Stop(Exception):
        pass

    def stop_after_first(i, name):
        raise Stop

    with pytest.raises(Stop):
        trace_run(cfg, on_episode_end=stop_after_first)
    path = trace_run(_cfg(root, tmp_path / "o", batch_size=2, domains=["fog", "snow"], default_checkpoints=False, resume=True))
    meta = schema.decode_metadata(pq.read_schema(path), path)
    assert [(p["episode"], p["step"]) for p in meta["speed_probe"]] == [(e, s) for e in ("fog", "snow") for s in (0, 50, 100)]
    assert all(p["ms"] > 0 for p in meta["speed_probe"])


def test_probe_every_sets_the_probes_steps_and_is_not_part_of_the_identity(cifar_c_root, tmp_path):
    """``--probe-every 4`` on 10-step episodes probes before steps 0, 4 and 8 of each (three
    probes: enough for the inside-a-trace check); the probes run outside the events, so a run
    resumed with the default interval continues the same trace and keeps the earlier probes."""
    from helpers.cifar import write_cifar_c

    root = write_cifar_c(tmp_path / "data", ["fog", "snow"], per_severity=20)
    kw = dict(batch_size=2, domains=["fog", "snow"], default_checkpoints=False)

    class Stop(Exception):
        pass

    def stop_after_first(i, name):
        raise Stop

    with pytest.raises(Stop):
        trace_run(_cfg(root, tmp_path / "o", probe_every=4, **kw), on_episode_end=stop_after_first)
    path = trace_run(_cfg(root, tmp_path / "o", resume=True, **kw))
    meta = schema.decode_metadata(pq.read_schema(path), path)
    assert [(p["episode"], p["step"]) for p in meta["speed_probe"]] == [("fog", 0), ("fog", 4), ("fog", 8), ("snow", 0)]
    assert schema.probe_drift({"speed_probe": meta["speed_probe"][:3]}) is not None


def test_probe_every_is_checked(cifar_c_root, tmp_path):
    with pytest.raises(ConfigError, match="--probe-every must be in 1..100000"):
        _cfg(cifar_c_root, tmp_path, probe_every=0).resolved()


@pytest.mark.slow
def test_the_interleave_tool_alternates_the_product_loops_and_replays_the_waits(tmp_path):
    """tools/machine_speed.py interleave (docs/results/validation-runs.md): every live run lies
    between two trace passes over the same steps, and so does the waited pass that follows it
    (the same steps, each after its live idle time); each variability sample size and the
    mini-blocks and the pass pairs give an idle curve; a tiny run, checked for its structure, not its times."""
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "interleave.json"
    run = subprocess.run(
        [
            sys.executable,
            str(root / "tools" / "machine_speed.py"),
            "interleave",
            "--batches",
            "6",
            "--rounds",
            "2",
            "--lambda-ms",
            "5",
            "--rho",
            "1,0.5",
            "--timing-sample",
            "4,6",
            "--mini-blocks",
            "2,2",
            "--waited-pass",
            "--idle-settle",
            "0.05",
            "--pass-pairs",
            "1,3",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(out.read_text())
    assert got["design"] == "interleave" and got["lambda_ms"] == 5 and got["spin_us"] is None
    # the ρ order reverses every round; each live run is followed by its waited pass
    assert [(r["kind"], r["rho"]) for r in got["runs"]] == [(k, rho) for rho in (1.0, 0.5, 0.5, 1.0) for k in ("live", "waited")]
    for live, waited in zip(got["runs"][::2], got["runs"][1::2]):
        assert waited["served"] == live["served"] and waited["median_idle_ms"] == live["median_idle_ms"]
    for r in got["runs"]:
        assert 1 <= r["served"] <= 6 and r["live_ms"] > 0 and r["trace_before_ms"] > 0 and r["trace_after_ms"] > 0
        assert r["live_over_sandwich"] == pytest.approx(r["live_ms"] / (r["trace_before_ms"] * r["trace_after_ms"]) ** 0.5)
        assert set(r["live_over_replayed"]) == {"4", "6", "mini", "passes"}
        assert r["probe_live_over_sandwich"] > 0  # every block, trace passes included, has its probe
    assert set(got["summary"]) == {"1", "0.5", "waited 1", "waited 0.5"} and all(s["runs"] == 2 for s in got["summary"].values())
    assert {n: sum(len(i["steps"]) for i in tv["sample"]) for n, tv in got["timing_variability"].items()} == {"4": 4, "6": 6}
    assert set(got["idle_curves"]) == {"4", "6", "mini", "passes"}
    mini, pairs = got["mini_blocks"], got["pass_pairs"]
    # one waited pass per gap, between two back-to-back passes, at the mini-blocks' gaps
    assert list(pairs) == list(mini) and all(len(m["ratios"]) == 1 and m["factor"] == m["ratios"][0] for m in pairs.values())
    assert mini and all(
        len(m["ratios"]) == 2 and m["factor"] == pytest.approx(sorted(m["ratios"])[0] / 2 + sorted(m["ratios"])[1] / 2)
        for m in mini.values()
    )
    assert [float(g) for g in mini] == got["idle_curves"]["mini"][0]  # the gaps, ascending
