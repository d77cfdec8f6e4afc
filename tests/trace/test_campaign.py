"""Campaigns: loading and checking the TOML, the local engine's device pinning, skipping
complete traces, and a real local Ray cluster surviving a worker killed mid-trace."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from helpers.campaigns import DEMO_ENV, run_twice, write
from tempora_trace.campaign import CampaignError, TaskResult, load_campaign, run_local, summary_line

TINY = """
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
methods = ["tent", "eta"]
domains = ["gaussian_noise", "fog", "contrast"]
options = { max_batches = 6, frozen_sample = 2, threads = 1 }
"""


def test_expands_groups_and_puts_standard_first(tmp_path):
    c = load_campaign(write(tmp_path, TINY.replace("seeds", "x") + ""))
    assert [t.method for t in c.tasks] == ["standard", "tent", "eta"]
    first, rest = c.ordered()
    assert [t.method for t in first] == ["standard"] and len(rest) == 2
    assert c.out == (tmp_path / "traces").resolve()
    multi = load_campaign(
        write(tmp_path, TINY.replace("batch_size = 32", "batch_size = 32\nseeds = [1, 2]\nseverities = [3, 5]"), "m.toml")
    )
    assert len(multi.tasks) == 12 and {(t.seed, t.severity) for t in multi.tasks} == {(1, 3), (1, 5), (2, 3), (2, 5)}


@pytest.mark.parametrize(
    "change, message",
    [
        (('"tent", "eta"', '"tent", "tnet"'), "unknown method 'tnet'"),
        (('model = "demo-resnet"', 'model = "resnet1000"'), "unknown model"),
        (('dataset = "demo"', 'dataset = "imagenet-c"\nweights = "random"'), "has no data_root"),
        (('machine = "cpu"\ndataset', 'machine = "h100"\ndataset'), "not declared under [machines]"),
        (('device = "cpu"', 'device = "tpu"'), "device must be cpu or cuda"),
        (('"tent", "eta"', '"adabn"]\nmodel2 = ["x"'), "unknown key"),
        (('domains = ["gaussian_noise", "fog", "contrast"]', 'domains = ["rain"]'), "unknown domain 'rain'"),
        (("options = { max_batches = 6", 'options = { max_batches = "6"'), "wrong type"),
        (("options = { max_batches = 6", "options = { lr = 3"), "not a tracer option"),
        (('methods = ["tent", "eta"]', 'methods = ["tent", "eta"]\npolicies = ["every:0"]'), "policies: --policy 'every:0'"),
    ],
)
def test_bad_campaign_files_are_one_line(tmp_path, change, message):
    path = write(tmp_path, TINY.replace(*change))
    with pytest.raises(CampaignError) as info:
        load_campaign(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_bad_toml_and_missing_file_are_one_line(tmp_path):
    with pytest.raises(CampaignError, match="not valid TOML"):
        load_campaign(write(tmp_path, "[campaign\n"))
    with pytest.raises(CampaignError, match="no such campaign file"):
        load_campaign(tmp_path / "none.toml")


def test_policies_expand_for_the_methods_that_adapt(tmp_path):
    """Each method with an adapt step is traced as it is and under each policy (every:1 is the
    method itself); standard and lame are traced once; each task writes its policy's file."""
    text = TINY.replace('methods = ["tent", "eta"]', 'methods = ["tent", "lame"]\npolicies = ["every:1,2", "fraction:0.5"]')
    c = load_campaign(write(tmp_path, text))
    assert [(t.method, t.policy) for t in c.tasks] == [
        ("standard", None),
        ("tent", None),
        ("tent", "every:2"),
        ("tent", "fraction:0.5"),
        ("lame", None),
    ]
    from tempora_trace.campaign import trace_location

    tent2 = c.tasks[2]
    assert "--policy" in tent2.argv(c.out) and tent2.label.split("/")[3].startswith("tent@every:2")
    assert trace_location(tent2, c.out).name == "tent@every2-bs32.parquet"


def test_incompatible_method_is_refused(tmp_path):
    path = write(tmp_path, TINY.replace('model = "demo-resnet"', 'model = "demo-resnet-gn"').replace('"tent", "eta"', '"adabn"'))
    with pytest.raises(CampaignError, match="does not run on model 'demo-resnet-gn'"):
        load_campaign(path)


def test_local_engine_pins_one_trace_per_gpu(tmp_path):
    text = TINY.replace('[machines.cpu]\ndevice = "cpu"', '[machines.cpu]\ndevice = "cuda"').replace(
        'methods = ["tent", "eta"]', 'methods = ["tent", "eta", "sar", "deyo", "cmf", "shot-im"]'
    )
    campaign = load_campaign(write(tmp_path, text.replace("batch_size = 32", "batch_size = 32\nseeds = [1, 2]")))
    log, lock = [], threading.Lock()

    def fake(task, out, lam, env):
        start = time.perf_counter()
        time.sleep(0.02)
        with lock:
            log.append((env["CUDA_VISIBLE_DEVICES"], start, time.perf_counter(), task))
        return TaskResult(task, "done", f"{task.method}-{task.seed}")

    results = run_local(campaign, launcher=fake, gpus=[0, 1, 2])
    assert len(results) == len(campaign.tasks) == 14 and all(r.status == "done" for r in results)
    by_device = {}
    for dev, s, e, _ in log:
        by_device.setdefault(dev, []).append((s, e))
    assert set(by_device) == {"0", "1", "2"}
    for spans in by_device.values():  # never two traces at once on one GPU
        spans.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    std_end = max(e for _, _, e, t in log if t.method == "standard")
    assert all(s >= std_end for _, s, _, t in log if t.method != "standard")  # λ first
    with pytest.raises(CampaignError, match="shows no GPU"):
        run_local(campaign, launcher=fake, gpus=[])


def _rows(path):
    t = pq.read_table(path).drop_columns(["e_ms", "l_ms", "delta_ms", "peak_mem_bytes"])
    return t.sort_by([("phase", "ascending"), ("episode", "ascending"), ("checkpoint", "ascending"), ("step", "ascending")]).to_pydict()


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """The tiny campaign traced by the local engine (3 traces), and run a second time."""
    return run_twice(tmp_path_factory.mktemp("local"), TINY)


@pytest.mark.e2e
@pytest.mark.slow
def test_local_engine_traces_and_a_second_run_does_nothing(local_run):
    campaign, first, mtimes, second = local_run
    assert [r.status for r in first] == ["done"] * 3, [r.message for r in first]
    assert [r.status for r in second] == ["skipped"] * 3
    assert {r.path: os.stat(r.path).st_mtime_ns for r in second} == mtimes
    assert "3 traces — 0 traced, 3 already complete, 0 failed" in summary_line(campaign, second, 1.0)


def _kill_first_trace_worker(root: Path, stop: threading.Event, killed: list) -> None:
    """Wait until some trace has completed an episode, then SIGKILL the Ray worker running it
    (and the trace process under it): a worker lost mid-trace."""
    while not stop.is_set():
        for rows in root.rglob("*.partial/episode-0000.rows"):
            stem = rows.parent.name[: -len(".partial")]
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if b"tempora_trace.cli" not in cmd or b"--method" not in cmd:
                    continue
                method = cmd[cmd.index(b"--method") + 1].decode()
                ours = str(rows.parent.parent).encode() in cmd
                if ours and (stem == method or stem.startswith(method + "-")):
                    ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                    for victim in (ppid, int(pid)):
                        try:
                            os.kill(victim, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    killed.append(stem)
                    return
        time.sleep(0.05)


@pytest.fixture(scope="module")
def ray_cluster():
    """A real local Ray instance with 2 CPUs for the module's Ray tests."""
    ray = pytest.importorskip("ray", reason="the cluster extra (Ray) is not installed")
    mp = pytest.MonkeyPatch()
    for k, v in DEMO_ENV.items():  # Ray's workers take the environment the cluster starts with
        mp.setenv(k, v)
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()
    mp.undo()


@pytest.mark.e2e
@pytest.mark.slow
def test_ray_campaign_survives_a_killed_worker_with_identical_rows(local_run, ray_cluster, tmp_path, monkeypatch):
    from tempora_trace.campaign import run_ray

    for k, v in DEMO_ENV.items():
        monkeypatch.setenv(k, v)
    _, reference, _, _ = local_run
    campaign = load_campaign(write(tmp_path, TINY))
    stop, killed = threading.Event(), []
    watcher = threading.Thread(target=_kill_first_trace_worker, args=(campaign.out, stop, killed), daemon=True)
    watcher.start()
    try:
        results = run_ray(campaign, retries=3)
    finally:
        stop.set()
        watcher.join(5)
    assert killed, "no worker was killed mid-trace: the test did not exercise a lost task"
    assert [r.status for r in results] == ["done"] * 3, [r.message for r in results]
    # every trace, the killed-and-resumed one included, has the rows of the local-engine run
    by_stem = {Path(r.path).stem: r.path for r in reference}
    for r in results:
        a, b = _rows(r.path), _rows(by_stem[Path(r.path).stem])
        assert a.keys() == b.keys()
        for col in a:
            assert np.array_equal(np.asarray(a[col]), np.asarray(b[col])), (r.path, col)
    again = run_ray(campaign, retries=0)
    assert [r.status for r in again] == ["skipped"] * 3


@pytest.mark.slow
def test_ray_refuses_a_device_type_no_node_has(ray_cluster, tmp_path):
    from tempora_trace.campaign import run_ray

    campaign = load_campaign(write(tmp_path, TINY.replace('device = "cpu"', 'device = "cuda"')))
    with pytest.raises(CampaignError, match="needs a GPU but no Ray node has one"):
        run_ray(campaign)


# --------------------------------------------------------------------------- the user's own model and images
BYO = """
[campaign]
name = "byo"
out = "traces"

[[groups]]
dataset = "folder:{flat}"
model = "{model}:build"
batch_size = 8
methods = ["tent"]
options = {{ input_size = 32, corruptions = ["gaussian_noise", "clean"], max_batches = 2, threads = 1 }}

[[groups]]
dataset = "folder:{nested}"
model = "timm:mobilenetv3_small_100"
weights = "random"
batch_size = 8
methods = ["tent"]
options = {{ input_size = 32, max_batches = 2, threads = 1 }}

[[groups]]
dataset = "folder:{flat}"
model = "torchvision:mobilenet_v3_small"
weights = "random"
batch_size = 8
methods = ["lame"]
options = {{ input_size = 32, class_map = "{csv}", max_batches = 1, threads = 1 }}
"""


def _byo_campaign(tmp_path, text=BYO):
    from helpers.byo import write_image_folder, write_model_file

    flat = write_image_folder(tmp_path / "flat", domains=None, size=(36, 36))
    nested = write_image_folder(tmp_path / "nested")
    model = write_model_file(tmp_path / "my_models.py")
    csv = tmp_path / "map.csv"
    csv.write_text("cat,281\ndog,207\nfox,277\n")
    return write(tmp_path, text.format(flat=flat, nested=nested, model=model, csv=csv), "byo.toml")


@pytest.mark.e2e
@pytest.mark.slow
def test_campaign_files_take_models_by_spec_and_folders(tmp_path):
    campaign = load_campaign(_byo_campaign(tmp_path))
    assert [(t.group, t.method) for t in campaign.tasks] == [
        (0, "standard"),
        (0, "tent"),
        (1, "standard"),
        (1, "tent"),
        (2, "standard"),
        (2, "lame"),
    ]
    argv = campaign.tasks[1].argv(campaign.out)
    assert argv[argv.index("--corruptions") + 1] == "gaussian_noise,clean" and argv[argv.index("--input-size") + 1] == "32"
    assert "--class-map" in campaign.tasks[5].argv(campaign.out) and "--weights" in campaign.tasks[3].argv(campaign.out)
    # the first group traced for real, then skipped as complete (the paths are the tracer's)
    campaign.tasks = campaign.tasks[:2]
    first = run_local(campaign)
    assert [r.status for r in first] == ["done"] * 2, [r.message for r in first]
    assert [r.status for r in run_local(campaign)] == ["skipped"] * 2
    import tempora_schema as schema

    meta = {r.task.method: schema.decode_metadata(pq.read_table(r.path).schema, r.path) for r in first}
    assert meta["tent"]["model"] == "my_models.py:build" and meta["tent"]["domains"] == ["gaussian_noise", "clean"]
    assert meta["tent"]["model_source"]["preprocess"]["input_size"] == 32 and meta["tent"]["severity"] == 5
    assert Path(first[0].path).parent.parent.name == "my_models.py-build"


@pytest.mark.parametrize(
    "change, message",
    [
        (('methods = ["lame"]', 'methods = ["spa"]'), "does not run on model 'torchvision:mobilenet_v3_small' \\(BatchNorm\\)"),
        (("timm:mobilenetv3_small_100", "timm:mobilenetv3_smal_100"), "close matches: mobilenetv3_small_100"),
        (("{model}:build", "{model}:buidl"), "has no 'buidl'"),
        (('"folder:{nested}"', '"folder:{nested}/nope"'), "no such folder"),
        (('class_map = "{csv}"', 'class_map = "{csv}.missing"'), "no such file"),
        (('corruptions = ["gaussian_noise", "clean"]', 'corruptions = ["rain"]'), "unknown corruption 'rain'"),
    ],
)
def test_campaign_specs_are_checked_when_the_file_loads(tmp_path, change, message):
    text = BYO.replace(*change, 1)
    with pytest.raises(CampaignError, match=message):
        load_campaign(_byo_campaign(tmp_path, text))
