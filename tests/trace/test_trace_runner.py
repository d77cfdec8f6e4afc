"""End-to-end tracer runs on tiny CIFAR-C-layout data: schema, timing split, checkpoints,
budgets, resume, naming."""

from __future__ import annotations

import math

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

import tempora_schema as schema
from helpers.cifar import tiny_config
from tempora_trace.checkpoints import default_schedule, sample_steps
from tempora_trace.config import TraceConfig
from tempora_trace.errors import OutputError
from tempora_trace.runner import TraceRun, trace_run

pytestmark = pytest.mark.usefixtures("tiny_models")


def read(path):
    table = pq.read_table(path)
    return table, schema.decode_metadata(table.schema, path), table.to_pydict()


def adapt_rows(d, cols=("episode", "step", "n", "correct", "updated")):
    idx = [i for i, p in enumerate(d["phase"]) if p == "adapt"]
    return [tuple(d[c][i] for c in cols) for i in idx]


def frozen_rows(d, cols=("episode", "checkpoint", "step", "n", "correct")):
    return sorted(tuple(d[c][i] for c in cols) for i, p in enumerate(d["phase"]) if p == "frozen")


@pytest.mark.parametrize("method", ["standard", "adabn", "tent"])
def test_trace_is_schema_valid_and_complete(cifar_c_root, tmp_path, method):
    path = trace_run(tiny_config(cifar_c_root, tmp_path / "out", method=method))
    assert path == tmp_path / "out" / f"{method}-bs8.parquet"
    table, meta, d = read(path)
    schema.validate_table(table, meta, path)
    # timing variability is measured by default (tempora_trace.variability), outside the rows
    # plus the timing variability, the heap's policy and (where the OS counts them) the events' page faults
    heap = {schema.HEAP_KEY} | ({schema.HEAP_FAULTS_KEY} if schema.HEAP_FAULTS_KEY in meta else set())
    assert set(meta) == set(schema.METADATA_FIELDS) | {"speed_probe", "speed_probe_kind", schema.VARIABILITY_KEY} | heap
    # one probe at each episode start (4 steps per episode: no later multiple of 50)
    assert [(p["episode"], p["step"]) for p in meta["speed_probe"]] == [("gaussian_noise", 0), ("fog", 0)]
    assert all(isinstance(p["ms"], float) and p["ms"] > 0 for p in meta["speed_probe"])
    assert meta["speed_probe_kind"] == "matmul-256-fp32x8"
    assert meta["method"] == method and meta["batch_size"] == 8 and meta["seed"] == 2025
    assert meta["device"].startswith("cpu:") and meta["frozen_eval"] == 32 and meta["warmup_batches"] == 5
    assert table.schema.remove_metadata() == schema.arrow_schema(None).remove_metadata()
    # 32 images per severity / batch 8 = 4 batches per domain, steps 0..3, all n = 8
    assert adapt_rows(d, ("episode", "step", "n")) == [(e, s, 8) for e in ("gaussian_noise", "fog") for s in range(4)]
    assert set(d["severity"]) == {5}
    # default schedule for N = 4 is {0,1,2,3}; checkpoint m is scored on steps m..3
    assert sorted({(e, c, s) for e, c, s, _, _ in frozen_rows(d)}) == sorted(
        (e, m, s) for e in ("gaussian_noise", "fog") for m in range(4) for s in range(m, 4)
    )
    for i, p in enumerate(d["phase"]):
        assert math.isclose(d["delta_ms"][i], d["e_ms"][i] + d["l_ms"][i])
        if p == "frozen":
            assert d["l_ms"][i] == 0.0 and d["updated"][i] is False
    assert not list(path.parent.glob("*.partial")), "partial folder must be removed after completion"
    # every method records its parity profile (docs/results/methods-parity.md) with its hyperparameters
    assert meta["method_params"] == {
        "standard": {},
        "adabn": {"bn_momentum": 0.1, "source_stats": "discard"},
        "tent": {"lr": 0.00025, "momentum": 0.9, "bn_momentum": 0.1, "source_stats": "discard"},
    }[method] | {"profile": "default"}


def test_standard_has_no_extrinsic_time_and_tent_does(cifar_c_root, tmp_path):
    _, _, std = read(trace_run(tiny_config(cifar_c_root, tmp_path, method="standard")))
    _, _, tent = read(trace_run(tiny_config(cifar_c_root, tmp_path, method="tent")))
    std_l = [d for d, p in zip(std["l_ms"], std["phase"]) if p == "adapt"]
    tent_l = [d for d, p in zip(tent["l_ms"], tent["phase"]) if p == "adapt"]
    std_e = [d for d, p in zip(std["e_ms"], std["phase"]) if p == "adapt"]
    # medians: one preemption by another process must not fail the test on a busy machine
    assert np.median(std_l) < 0.05 * np.median(std_e)  # nothing but a (no-op) sync after the prediction
    assert min(tent_l) > 0 and np.median(tent_l) > 5 * np.median(std_l)
    assert not any(u for u, p in zip(std["updated"], std["phase"]) if p == "adapt")
    assert all(u for u, p in zip(tent["updated"], tent["phase"]) if p == "adapt")


def _final_state(cfg):
    run = TraceRun(cfg.resolved(), lambda s: None)
    path = run.run()
    return path, {k: v.clone() for k, v in run.method.model.state_dict().items()}, run.method.optimizer.state_dict()


def test_checkpoints_leave_the_adapt_path_bit_identical(cifar_c_root, tmp_path):
    with_ckpt, state_a, opt_a = _final_state(tiny_config(cifar_c_root, tmp_path / "a", frozen_sample=None, domains=["fog"]))
    without, state_b, opt_b = _final_state(tiny_config(cifar_c_root, tmp_path / "b", default_checkpoints=False, domains=["fog"]))
    _, _, da = read(with_ckpt)
    _, _, db = read(without)
    assert frozen_rows(db) == [] and len(frozen_rows(da)) == 10
    assert adapt_rows(da) == adapt_rows(db)
    for k in state_a:
        assert torch.equal(state_a[k], state_b[k]), k
    for pid, st in opt_a["state"].items():
        assert torch.equal(st["momentum_buffer"], opt_b["state"][pid]["momentum_buffer"])


def test_frozen_checkpoint_zero_is_the_source_model_in_eval_mode(cifar_c_root, tmp_path):
    """Checkpoint 0 of tent scores the untouched model with BN in eval mode on the (reset)
    running statistics: the same predictions as an eval-mode model with reset buffers."""
    from tempora_trace.data import get_dataset
    from tempora_trace.data.streams import batch_order
    from tempora_trace.models import get_model

    _, _, d = read(trace_run(tiny_config(cifar_c_root, tmp_path, domains=["fog"], frozen_sample=None)))
    net, _ = get_model("tiny-bn", num_classes=10)
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()
    net.eval()
    domain = get_dataset("cifar10-c").open("fog", 5, cifar_c_root)
    order = batch_order(len(domain.source), 8, 2025, "fog")
    expected = []
    with torch.no_grad():
        for step, idx in enumerate(order):
            x, y = domain.source.get_batch(idx)
            expected.append(("fog", 0, step, 8, int((net(x).argmax(1) == y).sum())))
    assert [r for r in frozen_rows(d) if r[1] == 0] == expected


def test_budget_checkpoints_match_both_rules(cifar_c_root, tmp_path):
    lam = 0.01
    cfg = tiny_config(
        cifar_c_root,
        tmp_path / "b",
        domains=["fog"],
        default_checkpoints=False,
        frozen_sample=None,
        budgets_ms=[0.0, 1.5, 1e9],
        lambda_ms=lam,
    )
    _, _, d = read(trace_run(cfg))
    deltas = [d["delta_ms"][i] for i, p in enumerate(d["phase"]) if p == "adapt"]
    spent = np.cumsum([max(0.0, x - lam) for x in deltas])
    n = len(deltas)
    expected = set()
    for budget in (0.0, 1.5, 1e9):
        strict = max([0] + [j for j in range(1, n + 1) if spent[j - 1] <= budget])
        overshoot = min([j for j in range(1, n + 1) if spent[j - 1] >= budget] + [n])
        expected |= {m for m in (strict, overshoot) if m < n}
    got = {c for _, c, _, _, _ in frozen_rows(d)}
    assert got == expected and 0 in got
    # the strict checkpoint (restored from the pre-step snapshot) scores exactly like an explicit one
    explicit = tiny_config(
        cifar_c_root, tmp_path / "c", domains=["fog"], default_checkpoints=False, frozen_sample=None, checkpoints=sorted(expected)
    )
    _, _, d2 = read(trace_run(explicit))
    assert frozen_rows(d) == frozen_rows(d2)
    assert adapt_rows(d) == adapt_rows(d2)


def test_resume_after_interrupted_run_gives_identical_rows(cifar_c_root, tmp_path):
    reference, _, _ = _final_state(tiny_config(cifar_c_root, tmp_path / "ref"))

    class Killed(Exception):
        pass

    def kill_after_first(index, name):
        if index == 0:
            raise Killed

    cfg = tiny_config(cifar_c_root, tmp_path / "run")
    with pytest.raises(Killed):
        trace_run(cfg, on_episode_end=kill_after_first)
    partial = tmp_path / "run" / "tent-bs8.partial"
    assert (partial / "episode-0000.rows").exists() and not (tmp_path / "run" / "tent-bs8.parquet").exists()
    with pytest.raises(OutputError, match="--resume"):
        trace_run(cfg)
    with pytest.raises(OutputError, match="options differ"):
        trace_run(tiny_config(cifar_c_root, tmp_path / "run", resume=True, frozen_sample=2))
    (partial / "episode-0001.rows.tmp").write_bytes(b"half a file")  # what a kill mid-write leaves
    seen = []
    path = trace_run(tiny_config(cifar_c_root, tmp_path / "run", resume=True), echo=seen.append)
    assert "[resumed]" in seen[0] and "[resumed]" not in seen[1]
    _, _, d_ref = read(reference)
    table, meta, d = read(path)
    schema.validate_table(table, meta, path)
    assert adapt_rows(d) == adapt_rows(d_ref)
    assert frozen_rows(d) == frozen_rows(d_ref)


def test_refuses_to_overwrite_and_names_variants(cifar_c_root, tmp_path):
    path = trace_run(tiny_config(cifar_c_root, tmp_path, method="standard", domains=["fog"]))
    with pytest.raises(OutputError, match="--force"):
        trace_run(tiny_config(cifar_c_root, tmp_path, method="standard", domains=["fog"]))
    assert trace_run(tiny_config(cifar_c_root, tmp_path, method="standard", domains=["fog"], force=True)) == path
    other = trace_run(tiny_config(cifar_c_root, tmp_path, method="standard", domains=["fog"], seed=7, severity=3, stream="continual"))
    assert other.name == "standard-bs8-seed7-sev3-continual.parquet"
    cfg = TraceConfig(method="tent").resolved()
    assert cfg.file_stem() == "tent" and str(cfg.output_dir("cpu")) == "traces/demo/demo-resnet/cpu"
    assert cfg.domains[0] == "gaussian_noise" and len(cfg.domains) == 15


def test_continual_stream_is_one_episode_over_all_domains(cifar_c_root, tmp_path):
    table, meta, d = read(trace_run(tiny_config(cifar_c_root, tmp_path, stream="continual", max_batches=3)))
    schema.validate_table(table, meta, "x")
    assert meta["stream"] == "continual"
    rows = adapt_rows(d, ("episode", "domain", "step"))
    assert rows == [("continual", dom, s) for s, dom in enumerate(["gaussian_noise"] * 3 + ["fog"] * 3)]


def test_batch_order_depends_only_on_seed_and_domain(cifar_c_root, tmp_path):
    # the threaded prefetcher (workers=2) delivers the same batches in the same order
    _, _, both = read(trace_run(tiny_config(cifar_c_root, tmp_path / "a", method="standard", workers=2)))
    _, _, fog = read(trace_run(tiny_config(cifar_c_root, tmp_path / "b", method="standard", domains=["fog"])))
    assert [r for r in adapt_rows(both) if r[0] == "fog"] == adapt_rows(fog)


def test_schedules():
    assert default_schedule(1000) == list(range(17)) + [23, 32, 46, 64, 91, 128, 182, 256, 363, 512, 725]
    assert default_schedule(5) == [0, 1, 2, 3, 4]
    assert sample_steps(3, 10, None) == list(range(3, 10))
    assert sample_steps(0, 781, 32)[0] == 0 and sample_steps(0, 781, 32)[-1] == 780 and len(sample_steps(0, 781, 32)) == 32
    assert sample_steps(10, 10, 32) == []


def test_frozen_sample_scores_an_evenly_spaced_subset(cifar_c_root, tmp_path):
    _, meta, d = read(trace_run(tiny_config(cifar_c_root, tmp_path / "k", domains=["fog"], frozen_sample=2, checkpoints=[1])))
    assert meta["frozen_eval"] == 2
    by_ckpt: dict[int, list[int]] = {}
    for _, c, s, _, _ in frozen_rows(d):
        by_ckpt.setdefault(c, []).append(s)
    assert by_ckpt == {0: [0, 3], 1: [1, 3], 2: [2, 3], 3: [3]}  # first and last later batch
    _, meta_all, _ = read(trace_run(tiny_config(cifar_c_root, tmp_path / "a", domains=["fog"], frozen_sample=None)))
    assert meta_all["frozen_eval"] == "all"
