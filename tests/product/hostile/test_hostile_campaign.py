"""Hostile campaigns: every value ``tempora-trace run`` would refuse is refused when the campaign
is loaded, before any work, in one line (exit status 2, no traceback, the workspace byte for
byte as it was; tests/helpers/hostile.py); a complete trace of another identity is never counted as
done; two campaigns never trace on the same out folder or device at once; an unreachable Ray
cluster is a bounded wait and one line. Device locks live in a folder of the test
(``$TEMPORA_DEVICE_LOCKS``), so concurrent test runs on one machine do not meet."""

from __future__ import annotations

import errno
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers.hostile import assert_refused, inject_errno, invoke, snapshot
from tempora_schema.errors import OutputLockedError
from tempora_toolkit.atomic_files import output_lock
from tempora_trace import campaign as campaign_module
from tempora_trace.campaign import TaskResult, campaign_locks, device_lock_dir, load_campaign
from tempora_trace.cli import cli

PROG = "tempora-trace"

BASE = """
[campaign]
name = "tiny"
out = "traces"

[machines.cpu]
device = "cpu"

[[groups]]
machine = "cpu"
dataset = "demo"
model = "demo-resnet"
batch_size = 32
methods = ["tent"]
domains = ["fog"]
options = { max_batches = 2, threads = 1 }
"""


@pytest.fixture
def ws(tmp_path: Path, monkeypatch) -> Path:
    """The user's folder; the machine's device locks and the demo data cache live beside it."""
    monkeypatch.setenv("TEMPORA_DEVICE_LOCKS", str(tmp_path / "device-locks"))
    monkeypatch.setenv("TEMPORA_DEMO_TEST_SIZE", "64")
    monkeypatch.setenv("TEMPORA_HOME", str(tmp_path / "home"))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "c.toml").write_text(BASE)
    (ws / "notes.txt").write_text("the user's own file")
    return ws


def _group(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def _sub(old: str, new: str):
    return lambda ws: (ws / "c.toml").write_text(_group(BASE, old, new))


def _text(text: str):
    return lambda ws: (ws / "c.toml").write_text(text)


CASES = {
    # wrong types
    "batch_size a word": (_sub("batch_size = 32", 'batch_size = "abc"'), "batch_size must be an integer"),
    "batch_size 1.5": (_sub("batch_size = 32", "batch_size = 1.5"), "batch_size must be an integer, got 1.5"),
    "options a number": (_sub("options = { max_batches = 2, threads = 1 }", "options = 5"), "options must be a table"),
    "params of a method a number": (_sub('methods = ["tent"]', 'methods = ["tent"]\nparams = { tent = 5 }'), "params.tent must be a table"),
    "params a number": (_sub('methods = ["tent"]', 'methods = ["tent"]\nparams = 5'), "params must be a table"),
    "campaign a number": (_text('campaign = 5\n[[groups]]\nmethods = ["tent"]\n'), "[campaign] must be a table"),
    "machines a number": (_text('machines = 5\n[[groups]]\nmethods = ["tent"]\n'), "[machines] must be a table"),
    "a group a number": (_text("groups = [5]\n"), "groups[0] must be a table"),
    "model a list": (_sub('model = "demo-resnet"', 'model = ["demo-resnet"]'), "model must be a string"),
    "out a number": (_sub('out = "traces"', "out = 5"), "[campaign] out must be a str"),
    # values the tracer refuses, found at load
    "severity 9": (_sub("batch_size = 32", "batch_size = 32\nseverities = [9]"), "'--severity'"),
    "stream sideways": (_sub("batch_size = 32", 'batch_size = 32\nstreams = ["sideways"]'), "'--stream'"),
    "seed -1": (_sub("batch_size = 32", "batch_size = 32\nseeds = [-1]"), "'--seed'"),
    "budget inf": (_sub("batch_size = 32", "batch_size = 32\nbudgets_ms = [inf]"), "'--budgets-ms'"),
    "budget nan": (_sub("batch_size = 32", "batch_size = 32\nbudgets_ms = [nan]"), "'--budgets-ms'"),
    "batch_size 0": (_sub("batch_size = 32", "batch_size = 0"), "'--batch-size'"),
    "checkpoint not a number": (_sub("threads = 1 }", 'threads = 1, checkpoints = [1, "x"] }'), "'--checkpoints'"),
    "max_batches 0": (_sub("max_batches = 2", "max_batches = 0"), "'--max-batches'"),
    "threads 99999": (_sub("threads = 1", "threads = 99999"), "'--threads'"),
    "lr a word": (_sub('methods = ["tent"]', 'methods = ["tent"]\nparams = { tent = { lr = "abc" } }'), "option lr must be a float"),
    "unknown method parameter": (_sub('methods = ["tent"]', 'methods = ["tent"]\nparams = { tent = { lr_typo = 1.0 } }'), "has no option"),
    "lr NaN": (_sub('methods = ["tent"]', 'methods = ["tent"]\nparams = { tent = { lr = nan } }'), "not a finite number"),
    "missing data_root": (
        _text(
            _group(_group(BASE, 'device = "cpu"', 'device = "cpu"\ndata_root = "{ws}/no-data"'), '"demo"', '"cifar10-c"').replace(
                'model = "demo-resnet"', ""
            )
        ),
        "no such folder on this machine",
    ),
    # Ray: an unreachable cluster is a bounded wait
    "ray cluster unreachable": (None, "cannot reach a Ray cluster there"),
}
EXTRA_ARGS = {"ray cluster unreachable": ["--engine", "ray", "--address", "127.0.0.1:1"]}


#: Cases this module adds to the hostile-input suite (docs/reference/errors.md counts them): the table, a
#: read-only out, no cluster at auto, two stale identities, a stale partial, two second campaigns,
#: the locks held.
CASE_COUNT = len(CASES) + 8


@pytest.mark.parametrize("case", list(CASES))
def test_refused_before_any_work_in_one_line(case, ws, monkeypatch):
    setup, needle = CASES[case]
    if setup is not None:
        setup(ws)
        text = (ws / "c.toml").read_text().replace("{ws}", str(ws))
        (ws / "c.toml").write_text(text)
    monkeypatch.setenv("TEMPORA_RAY_CONNECT_TIMEOUT", "5")
    traced = []
    monkeypatch.setattr(campaign_module, "run_trace_process", lambda *a, **k: traced.append(a) or TaskResult(a[0], "failed"))
    before = snapshot(ws)
    assert_refused(invoke(cli, ["campaign", ws / "c.toml", "--quiet", *EXTRA_ARGS.get(case, [])]), PROG, needle, before, ws)
    assert traced == []


def test_a_read_only_out_is_refused_before_any_work(ws, monkeypatch):
    before = snapshot(ws)
    inject_errno(monkeypatch, ws, errno.EROFS, ("open", "mkdir"))
    line = assert_refused(invoke(cli, ["campaign", ws / "c.toml", "--quiet"]), PROG, "read-only file system", before, ws)
    assert "[campaign] out" in line


def test_no_ray_cluster_at_auto_is_one_line_about_ray(ws, monkeypatch):
    """Ray's ConnectionError is an OSError: it must not read "cannot access output"."""
    ray = pytest.importorskip("ray")

    def no_cluster(*args, **kwargs):
        raise ConnectionError("Could not find any running Ray instance. Please specify the one to connect to.")

    monkeypatch.setattr(ray, "init", no_cluster)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    before = snapshot(ws)
    line = assert_refused(
        invoke(cli, ["campaign", ws / "c.toml", "--quiet", "--engine", "ray", "--address", "auto"]), PROG, "--address auto", before, ws
    )
    assert "Could not find any running Ray instance" in line and "cannot access" not in line


# ------------------------------------------------------------------------ identity
def _rows(path: Path) -> dict:
    t = pq.read_table(path).drop_columns(["e_ms", "l_ms", "delta_ms", "peak_mem_bytes"])
    return t.sort_by([("phase", "ascending"), ("episode", "ascending"), ("checkpoint", "ascending"), ("step", "ascending")]).to_pydict()


def _traces(folder: Path) -> dict[str, Path]:
    return {p.name: p for p in sorted(folder.rglob("*.parquet"))}


def test_a_changed_campaign_never_counts_stale_traces_as_complete(ws):
    """max_batches 2 → 1: the 2-batch traces are of another identity. The run is refused in one
    line naming the difference, nothing changes; --force traces them again, and the rows are
    those of the same campaign run from scratch."""
    res = invoke(cli, ["campaign", ws / "c.toml", "--quiet"])
    assert res.exit_code == 0, res.stderr
    assert "2 traces — 2 traced" in res.stdout
    (ws / "c.toml").write_text(_group(BASE, "max_batches = 2", "max_batches = 1"))
    before = snapshot(ws)
    line = assert_refused(invoke(cli, ["campaign", ws / "c.toml", "--quiet"]), PROG, "another identity", before, ws)
    assert "max_batches 2 ≠ 1" in line and "--force" in line
    res = invoke(cli, ["campaign", ws / "c.toml", "--quiet", "--force"])
    assert res.exit_code == 0, res.stderr
    assert "2 traces — 2 traced, 0 already complete" in res.stdout
    fresh = ws / "fresh"
    fresh.mkdir()
    (fresh / "c.toml").write_text(_group(BASE, "max_batches = 2", "max_batches = 1"))
    assert invoke(cli, ["campaign", fresh / "c.toml", "--quiet"]).exit_code == 0
    again, scratch = _traces(ws / "traces"), _traces(fresh / "traces")
    assert again.keys() == scratch.keys() and len(again) == 2
    for name in again:
        assert _rows(again[name]) == _rows(scratch[name]), name
    res = invoke(cli, ["campaign", ws / "c.toml", "--quiet"])  # now complete for this identity
    assert res.exit_code == 0 and "2 traces — 0 traced, 2 already complete" in res.stdout


def test_a_changed_method_parameter_or_frozen_sample_is_another_identity(ws):
    """Checked without tracing, on a trace whose metadata says exactly what the campaign's run
    would write: it stands for the task, until the campaign sets another lr or frozen sample."""
    import json

    from tempora_schema import METADATA_KEY
    from tempora_sim.sweeps.synthetic import make_trace

    def trace_for(text: str):
        (ws / "c.toml").write_text(text)
        campaign = load_campaign(ws / "c.toml")
        task = next(t for t in campaign.tasks if t.method == "tent")
        return campaign, task, campaign_module.trace_location(task, campaign.out)

    campaign, task, path = trace_for(_group(BASE, 'methods = ["tent"]', 'methods = ["tent"]\nparams = { tent = { lr = 0.001 } }'))
    cfg = campaign_module.task_config(task, campaign.out)
    meta, table = make_trace("tent", num_batches=2, episodes=tuple(cfg.domains), batch_size=32, num_classes=10)
    meta.update(
        dataset=cfg.dataset,
        model=cfg.model,
        seed=cfg.seed,
        stream=cfg.stream,
        severity=cfg._severity(),
        domains=list(cfg.domains),
        max_batches=cfg.max_batches,
        threads=cfg.threads,
        method_params={"lr": 0.001, "momentum": 0.9},
        frozen_eval="all" if cfg.frozen_sample is None else cfg.frozen_sample,
    )
    path.parent.mkdir(parents=True)
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta)}), path)
    assert campaign_module.other_identity(task, campaign.out, path) == []
    campaign, task, _ = trace_for(_group(BASE, 'methods = ["tent"]', 'methods = ["tent"]\nparams = { tent = { lr = 0.002 } }'))
    assert campaign_module.other_identity(task, campaign.out, path) == ["param lr 0.001 ≠ 0.002"]
    campaign, task, _ = trace_for(
        _group(
            _group(BASE, 'methods = ["tent"]', 'methods = ["tent"]\nparams = { tent = { lr = 0.001 } }'),
            "threads = 1",
            "threads = 1, frozen_sample = 3",
        )
    )
    assert campaign_module.other_identity(task, campaign.out, path) == [f"frozen_eval {meta['frozen_eval']!r} ≠ 3"]


# ------------------------------------------------------------------------ one campaign at a time
def test_a_second_campaign_on_the_same_out_folder_is_refused(ws):
    campaign = load_campaign(ws / "c.toml")
    other = ws / "other"
    other.mkdir()
    (other / "c.toml").write_text(BASE.replace('out = "traces"', f'out = "{ws / "traces"}"'))
    with campaign_locks(campaign, "ray"):  # the out folder only: the device locks are the next test's
        before = snapshot(ws)
        line = assert_refused(invoke(cli, ["campaign", other / "c.toml", "--quiet"]), PROG, "another campaign", before, ws)
    assert "out folder" in line and "process" in line


def test_a_second_campaign_on_the_same_device_is_refused(ws):
    campaign = load_campaign(ws / "c.toml")
    other = ws / "other"
    other.mkdir()
    (other / "c.toml").write_text(BASE)  # its own out folder, the same CPU
    with campaign_locks(campaign, "local"):
        before = snapshot(ws)
        line = assert_refused(invoke(cli, ["campaign", other / "c.toml", "--quiet"]), PROG, "another campaign", before, ws)
    assert "device cpu of this machine" in line


def test_a_campaign_holds_its_locks_for_its_whole_run(ws, monkeypatch):
    """While each of its traces runs, neither the out folder nor the device can be taken."""
    held = []

    def launcher(task, out_root, lambda_ms=None, env=None, force=False):
        for target in (ws / "traces", device_lock_dir() / "device-cpu"):
            with pytest.raises(OutputLockedError):
                with output_lock(target, "probe"):
                    pass
        held.append(task.method)
        return TaskResult(task, "done", str(out_root / f"{task.method}.parquet"))

    monkeypatch.setattr(campaign_module, "run_trace_process", launcher)
    res = invoke(cli, ["campaign", ws / "c.toml", "--quiet"])
    assert res.exit_code == 0, res.stderr
    assert held == ["standard", "tent"]
    with output_lock(ws / "traces", "probe"), output_lock(device_lock_dir() / "device-cpu", "probe"):
        pass  # released when the run ended


def test_force_starts_over_an_interrupted_trace_of_another_identity(ws, monkeypatch):
    """A partial trace of the campaign before it changed cannot be resumed (the tracer says so);
    with --force the campaign starts it over, without it the task fails with that line."""
    import subprocess

    campaign = load_campaign(ws / "c.toml")
    task = next(t for t in campaign.tasks if t.method == "tent")
    path = campaign_module.trace_location(task, campaign.out)
    path.with_suffix(".partial").mkdir(parents=True)
    refusal = f"tempora-trace: error: cannot resume {path.with_suffix('.partial')}: options differ from the interrupted run (max_batches); pass --force to start over\n"
    calls = []

    def fake_run(argv, **kwargs):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 2, "", refusal) if "--resume" in argv else subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(campaign_module.subprocess, "run", fake_run)
    kept = campaign_module.run_trace_process(task, campaign.out)
    assert kept.status == "failed" and "options differ" in kept.message and len(calls) == 1
    calls.clear()
    redone = campaign_module.run_trace_process(task, campaign.out, force=True)
    assert redone.status == "done" and "--resume" in calls[0] and "--force" in calls[1] and "--resume" not in calls[1]
