"""Campaigns with profile groups (``profiles = true``): a trace group and a profile group side
by side on the demo data, each file valid and of its kind, a rerun that does nothing, an
interrupted profile resumed, the one-line errors, and ``tempora-sim predict`` reading the
campaign's two trees as they are."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import tempora_schema as schema
from helpers.campaigns import DEMO_ENV, run_twice, write
from tempora_schema.prediction import PREDICTED_MARK, is_profile
from tempora_trace.campaign import CampaignError, check_existing, dry_run_lines, load_campaign, run_local, summary_line, trace_location

GROUP = """
[[groups]]
dataset = "demo"
model = "demo-resnet"
batch_size = 32
methods = ["tent"]
domains = ["gaussian_noise", "fog"]
"""

SIDE_BY_SIDE = (
    """
[campaign]
name = "side-by-side"
out = "traces"

[machines.cpu]
device = "cpu"
"""
    + GROUP
    + "options = { max_batches = 6, frozen_sample = 2, threads = 1 }\n"
    + GROUP
    + "options = { max_batches = 6, threads = 1 }\nprofiles = true\nprofile_batches = 4\n"
)


def read(path):
    """A file's metadata and rows, checked against the trace schema (tempora_schema)."""
    table = pq.read_table(path)
    meta = schema.decode_metadata(table.schema, path)
    schema.validate_table(table, meta, path)
    return meta, table.to_pydict()


def test_profile_groups_expand_into_profile_tasks_under_their_own_tree(tmp_path):
    c = load_campaign(write(tmp_path, SIDE_BY_SIDE))
    assert [(t.group, t.method, t.profile_batches) for t in c.tasks] == [
        (0, "standard", None),
        (0, "tent", None),
        (1, "standard", 4),
        (1, "tent", 4),
    ]
    trace, profile = c.tasks[1], c.tasks[3]
    assert trace.argv(c.out)[0] == "run" and "--profile-batches" not in trace.argv(c.out)
    argv = profile.argv(c.root(profile))
    assert argv[0] == "profile" and argv[argv.index("--profile-batches") + 1] == "4"
    # profiles beside the traces, as the tracer's own default folders: traces/… and profiles/…
    assert c.root(trace) == (tmp_path / "traces").resolve() and c.root(profile) == (tmp_path / "profiles").resolve()
    assert trace_location(profile, c.root(profile)) == c.root(profile) / "demo" / "demo-resnet" / "cpu" / "tent-bs32.parquet"
    # the default length is the tracer's
    from tempora_trace.options import DEFAULT_PROFILE_BATCHES

    default = load_campaign(write(tmp_path, SIDE_BY_SIDE.replace("profile_batches = 4\n", ""), "d.toml"))
    assert {t.profile_batches for t in default.tasks if t.group == 1} == {DEFAULT_PROFILE_BATCHES}
    moved = load_campaign(write(tmp_path, SIDE_BY_SIDE.replace('out = "traces"', 'out = "traces"\nprofiles_out = "board"'), "m.toml"))
    assert moved.root(moved.tasks[3]) == (tmp_path / "board").resolve()


def test_dry_run_says_which_tasks_are_profiles(tmp_path):
    lines = list(dry_run_lines(write(tmp_path, SIDE_BY_SIDE)))
    assert [ln.endswith(" profile:4") for ln in lines[:4]] == [False, False, True, True]
    assert lines[4] == (
        f"campaign side-by-side: 2 traces and 2 profiles; traces under {(tmp_path / 'traces').resolve()}, "
        f"profiles under {(tmp_path / 'profiles').resolve()}"
    )


@pytest.mark.parametrize(
    "change, message",
    [
        (("profiles = true", 'profiles = "yes"'), "groups[1]: profiles must be true or false, got 'yes'"),
        (("profile_batches = 4", "profile_batches = 0"), "groups[1]: profile_batches must be an integer >= 1 or 'auto', got 0"),
        (("profile_batches = 4", "profile_batches = 2.5"), "profile_batches must be an integer >= 1 or 'auto', got 2.5"),
        (("profile_batches = 4", "profile_batches = true"), "profile_batches must be an integer >= 1 or 'auto', got True"),
        (("profile_batches = 4", 'profile_batches = "Auto"'), "profile_batches must be an integer >= 1 or 'auto', got 'Auto'"),
        (("profile_batches = 4", "profile_batches = 4294967296"), "--profile-batches"),
        (("profiles = true", "profiles = false"), "groups[1]: profile_batches is for a profile group; add profiles = true"),
        (("profiles = true\nprofile_batches = 4", "profile_batches = 4"), "profile_batches is for a profile group"),
        (
            ("options = { max_batches = 6, threads = 1 }", "options = { max_batches = 6, threads = 1, frozen_sample = 2 }"),
            "groups[1]: options.frozen_sample is not an option of a profile (profiles = true)",
        ),
        (
            ("options = { max_batches = 6, threads = 1 }", "options = { max_batches = 6, threads = 1, checkpoints = [1] }"),
            "options.checkpoints is not an option of a profile",
        ),
        (
            ("options = { max_batches = 6, threads = 1 }", "options = { threads = 1, no_default_checkpoints = true }"),
            "options.no_default_checkpoints is not an option of a profile",
        ),
        (("profiles = true", "profiles = true\nbudgets_ms = [100]"), "groups[1]: budgets_ms: a profile (profiles = true) scores no budget"),
        (('out = "traces"', 'out = "traces"\nprofiles_out = "traces"'), "profiles_out"),
        (('out = "traces"', 'out = "traces"\nprofiles_out = "traces/profiles"'), "must be separate folders"),
        (('out = "traces"', 'out = "traces"\nprofiles_out = 3'), "[campaign] profiles_out must be a str"),
    ],
)
def test_bad_profile_options_are_one_line(tmp_path, change, message):
    assert change[0] in SIDE_BY_SIDE
    with pytest.raises(CampaignError) as info:
        load_campaign(write(tmp_path, SIDE_BY_SIDE.replace(*change)))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_bad_profile_option_is_exit_2_with_nothing_run(tmp_path, capsys):
    from tempora_trace.cli import main

    path = write(tmp_path, SIDE_BY_SIDE.replace("profile_batches = 4", "profile_batches = 0"))
    assert main(["campaign", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "profile_batches must be an integer >= 1" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml"]


def test_the_kind_of_a_complete_file_is_part_of_its_identity(tmp_path):
    """A trace found where a profile is asked for (or the reverse) is no finished task."""
    from tempora_trace.campaign import task_config, task_differences

    c = load_campaign(write(tmp_path, SIDE_BY_SIDE))
    trace, profile = c.tasks[1], c.tasks[3]
    cfg = task_config(profile, c.root(profile))
    assert task_differences({}, profile, cfg) == ["kind 'trace' ≠ 'profile'"]
    assert task_differences({"kind": "profile"}, trace, task_config(trace, c.out)) == ["kind 'profile' ≠ 'trace'"]


def test_an_auto_length_task_takes_only_a_file_of_todays_rule(tmp_path):
    """``profile_batches = "auto"`` (the default): the count follows the stream, so a complete
    file is this task's when it was chosen by the same rule; a count asked for takes any file
    of that count."""
    from tempora_trace.campaign import task_config, task_differences

    c = load_campaign(write(tmp_path, SIDE_BY_SIDE.replace("profile_batches = 4", 'profile_batches = "auto"')))
    auto = c.tasks[3]
    assert auto.profile_batches == "auto" and "profile:auto" in auto.label
    argv = auto.argv(c.root(auto))
    assert argv[argv.index("--profile-batches") + 1] == "auto"

    def length(meta, task):
        return [d for d in task_differences(meta, task, task_config(task, c.root(task))) if d.startswith("profile_batches")]

    rule = {"share": 0.025, "min": 8}
    assert length({"kind": "profile", "profile_batches": 8, "profile_auto": rule}, auto) == []
    assert length({"kind": "profile", "profile_batches": 8}, auto) == ["profile_batches 8 ≠ 'auto' {'share': 0.025, 'min': 8}"]
    assert length({"kind": "profile", "profile_batches": 4, "profile_auto": {"share": 0.025, "min": 4}}, auto) != []
    fixed = load_campaign(write(tmp_path, SIDE_BY_SIDE, "fixed.toml")).tasks[3]
    assert length({"kind": "profile", "profile_batches": 4, "profile_auto": {"share": 0.025, "min": 4}}, fixed) == []
    assert length({"kind": "profile", "profile_batches": 5}, fixed) == ["profile_batches 5 ≠ 4"]


# --------------------------------------------------------------------------- run for real
@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory):
    """The side-by-side campaign run by the local engine (2 traces, 2 profiles), then again."""
    tmp = tmp_path_factory.mktemp("profiles")
    return (tmp, *run_twice(tmp, SIDE_BY_SIDE))


@pytest.mark.e2e
@pytest.mark.slow
def test_a_campaign_writes_valid_traces_and_profiles_and_a_rerun_skips_both(side_by_side):
    tmp, campaign, first, mtimes, second = side_by_side
    assert [r.status for r in first] == ["done"] * 4, [r.message for r in first]
    by = {(r.task.method, r.task.is_profile): r.path for r in first}
    trace_meta, trace_rows = read(by["tent", False])
    profile_meta, profile_rows = read(by["tent", True])
    assert Path(by["tent", False]).is_relative_to(tmp / "traces") and Path(by["tent", True]).is_relative_to(tmp / "profiles")
    assert not is_profile(trace_meta) and schema.PROFILE_BATCHES_KEY not in trace_meta
    assert profile_meta["kind"] == "profile" and profile_meta["profile_batches"] == 4 and profile_meta["frozen_eval"] == 0
    # the profile is the trace's configuration: same identity, the first 4 batches of each episode
    assert schema.TraceIdentity.from_metadata(profile_meta) == schema.TraceIdentity.from_metadata(trace_meta)
    assert sorted(zip(profile_rows["episode"], profile_rows["step"])) == sorted((e, s) for e in ("fog", "gaussian_noise") for s in range(4))
    # a second run does no work: every file skipped, none rewritten
    assert [r.status for r in second] == ["skipped"] * 4
    assert {r.path: os.stat(r.path).st_mtime_ns for r in second} == mtimes
    assert "2 traces and 2 profiles — 0 traced, 4 already complete, 0 failed" in summary_line(campaign, second, 1.0)


@pytest.mark.e2e
@pytest.mark.slow
def test_a_profile_of_another_length_under_the_name_is_refused_before_any_work(side_by_side):
    tmp, *_ = side_by_side
    longer = load_campaign(write(tmp, SIDE_BY_SIDE.replace("profile_batches = 4", "profile_batches = 5"), "longer.toml"))
    with pytest.raises(CampaignError) as info:
        check_existing(longer, force=False)
    assert "profile_batches 4 ≠ 5" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.e2e
@pytest.mark.slow
def test_predict_takes_the_campaigns_traces_and_profiles(side_by_side, tmp_path):
    from tempora_sim.commands.main import main as sim

    tmp, *_ = side_by_side
    result = CliRunner().invoke(
        sim, ["predict", str(tmp / "traces"), "--profiles", str(tmp / "profiles"), "--out", str(tmp_path / "predicted")]
    )
    assert result.exit_code == 0, result.output
    written = sorted((tmp_path / "predicted").rglob("*.parquet"))
    assert [p.name for p in written] == ["standard-bs32.parquet", "tent-bs32.parquet"]
    for p in written:
        meta, _ = read(p)
        assert meta["device"].endswith(PREDICTED_MARK) and meta["predicted"]["accuracy"]["differ"] == 0


@pytest.mark.e2e
@pytest.mark.slow
def test_an_interrupted_profile_is_resumed(tmp_path, monkeypatch):
    """A profile stopped after its first episode leaves its completed episode; the campaign
    continues it with --resume and the file holds every episode's first batches."""
    from tempora_trace import campaign as campaign_module
    from tempora_trace.profiling import ProfileRun

    for k, v in DEMO_ENV.items():
        monkeypatch.setenv(k, v)
    only = SIDE_BY_SIDE.split("[[groups]]")
    text = only[0] + "[[groups]]" + only[2].replace('methods = ["tent"]', 'methods = ["standard"]')
    c = load_campaign(write(tmp_path, text))
    (task,) = c.tasks
    path = trace_location(task, c.root(task))
    cfg = dataclasses.replace(campaign_module.task_config(task, c.root(task)), out=str(path.parent), quiet=True)

    def stop(index, name):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ProfileRun(cfg, lambda s: None).run(stop)
    assert path.with_suffix(".partial").is_dir() and not path.exists()
    launched, real = [], subprocess.run

    def spy(argv, *args, **kwargs):
        launched.append(list(argv))
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(campaign_module.subprocess, "run", spy)
    (result,) = run_local(c)
    assert result.status == "done", result.message
    assert len(launched) == 1 and "--resume" in launched[0] and launched[0][3] == "profile"
    meta, rows = read(path)
    assert meta["profile_batches"] == 4 and sorted(set(rows["episode"])) == ["fog", "gaussian_noise"] and len(rows["step"]) == 8


@pytest.mark.e2e
@pytest.mark.slow
def test_the_ray_engine_runs_profiles_into_their_tree(tmp_path, monkeypatch):
    """A profile group on a real local Ray instance: written under profiles_out, valid, and
    skipped when run again."""
    ray = pytest.importorskip("ray", reason="the cluster extra (Ray) is not installed")
    from tempora_trace.campaign import run_ray

    for k, v in DEMO_ENV.items():  # Ray's workers take the environment the instance starts with
        monkeypatch.setenv(k, v)
    parts = SIDE_BY_SIDE.split("[[groups]]")
    c = load_campaign(write(tmp_path, parts[0] + "[[groups]]" + parts[2].replace('methods = ["tent"]', 'methods = ["standard"]')))
    ray.init(num_cpus=1, num_gpus=0, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        (result,) = run_ray(c, retries=0)
        (again,) = run_ray(c, retries=0)
    finally:
        ray.shutdown()
    assert result.status == "done", result.message
    assert Path(result.path) == (tmp_path / "profiles" / "demo" / "demo-resnet" / "cpu" / "standard-bs32.parquet")
    meta, rows = read(result.path)
    assert meta["kind"] == "profile" and meta["profile_batches"] == 4 and len(rows["step"]) == 8
    assert again.status == "skipped" and not (tmp_path / "traces").exists()
