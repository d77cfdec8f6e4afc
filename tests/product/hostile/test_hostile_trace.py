"""Hostile input to ``tempora-trace``: one stderr line, exit status 2, no traceback, and the
workspace exactly as it was (see tests/helpers/hostile.py). In-process on the tiny CIFAR-C layout and
the tiny BN model (4 batches of 8 per domain), so a case that runs costs about a second."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers.byo import write_image_folder, write_model_file
from helpers.cifar import tiny_cifar_args
from helpers.hostile import assert_refused, inject_errno, invoke, snapshot, user_workspace
from helpers.processes import child_env
from tempora_sim.sweeps.synthetic import write_trace
from tempora_toolkit.atomic_files import output_lock
from tempora_trace.cli import cli

PROG = "tempora-trace"
ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.usefixtures("one_thread", "tiny_models")


def tiny(ws: Path, *extra, out: str | None = None) -> list[str]:
    return tiny_cifar_args(ws / "cifar-c", out if out is not None else str(ws / "out"), *extra)


@pytest.fixture
def ws(cifar_c_root: Path, monkeypatch) -> Path:
    return user_workspace(cifar_c_root, monkeypatch)


def _loop(ws):
    os.symlink(ws / "loop-b", ws / "loop-a")
    os.symlink(ws / "loop-a", ws / "loop-b")


def _garbage_standard(ws):
    (ws / "out").mkdir()
    (ws / "out" / "standard-bs8.parquet").write_bytes(b"not parquet at all")


def _tent_as_standard(ws):
    write_trace(ws / "out" / "standard-bs8.parquet", "tent", num_batches=4, episodes=("fog",), batch_size=8, num_classes=10)


def _partial(ws):
    (ws / "out" / "tent-bs8.partial").mkdir(parents=True)
    (ws / "out" / "tent-bs8.partial" / "config.json").write_text('{"method": "tent", "seed": 1}')


RUN = ["run", "--method", "tent"]
CASES = {
    "unknown option": ([*RUN, "--bogus"], "no such option '--bogus'", None),
    "unknown subcommand": (["nosuch"], "no such command 'nosuch'", None),
    "missing method": (["run"], "--method is required", None),
    "unknown method": (["run", "--method", "nope"], "unknown method 'nope'", None),
    "unknown dataset": ([*RUN, "--dataset", "mnist-c"], "unknown dataset 'mnist-c'", None),
    "negative seed": ([*RUN, "--seed", "-1"], "'--seed'", None),
    "seed beyond int64": ([*RUN, "--seed", "99999999999999999999999"], "'--seed'", None),
    "seed not a number": ([*RUN, "--seed", "abc"], "'--seed'", None),
    "param NaN": ([*RUN, "--param", "lr=NaN"], "not a finite number", None),
    "param overflow": ([*RUN, "--param", "lr=1e999"], "not a finite number", None),
    "param -Infinity": ([*RUN, "--param", "lr=-Infinity"], "not a finite number", None),
    "param NaN in a list": ([*RUN, "--param", "betas=[0.9, NaN]"], "not a finite number", None),
    "param without value": ([*RUN, "--param", "lr"], "KEY=VALUE", None),
    "param unknown": ([*RUN, "--param", "lr_typo=1"], "has no option", None),
    "batch size zero": ([*RUN, "--batch-size", "0"], "'--batch-size'", None),
    "batch size beyond int32": ([*RUN, "--batch-size", "2147483648"], "'--batch-size'", None),
    "max batches zero": ([*RUN, "--max-batches", "0"], "'--max-batches'", None),
    "budgets NaN": ([*RUN, "--budgets-ms", "nan", "--lambda-ms", "10"], "'--budgets-ms'", None),
    "budgets negative": ([*RUN, "--budgets-ms", "1s,-2", "--lambda-ms", "10"], "'--budgets-ms'", None),
    "lambda NaN": ([*RUN, "--budgets-ms", "1s", "--lambda-ms", "nan"], "'--lambda-ms'", None),
    "lambda zero": ([*RUN, "--budgets-ms", "1s", "--lambda-ms", "0"], "'--lambda-ms'", None),
    "budgets without lambda": ([*RUN, "--budgets-ms", "1s"], "needs --lambda-ms", None),
    "checkpoints empty item": ([*RUN, "--checkpoints", "1,,2"], "empty item", None),
    "checkpoints beyond int32": ([*RUN, "--checkpoints", "2147483648"], "'--checkpoints'", None),
    "frozen sample zero": ([*RUN, "--frozen-sample", "0"], "'--frozen-sample'", None),
    "frozen sample word": ([*RUN, "--frozen-sample", "many"], "'--frozen-sample'", None),
    "severity 9": ([*RUN, "--severity", "9"], "'--severity'", None),
    "stream unknown": ([*RUN, "--stream", "sometimes"], "'--stream'", None),
    "threads zero": ([*RUN, "--threads", "0"], "'--threads'", None),
    "probe every zero": ([*RUN, "--probe-every", "0"], "'--probe-every'", None),
    "profile probe every word": (["profile", "--method", "tent", "--probe-every", "often"], "'--probe-every'", None),
    "workers negative": ([*RUN, "--workers", "-1"], "'--workers'", None),
    "name with a slash": ([*RUN, "--name", "a/b"], "may only use", None),
    "unknown domain": ([*RUN, "--domains", "rain"], "unknown domain 'rain'", None),
    "policy kind unknown": ([*RUN, "--policy", "sometimes:3"], "--policy 'sometimes:3': the kind must be", None),
    "policy every zero": ([*RUN, "--policy", "every:0"], "K must be ≥ 1", None),
    "policy fraction above 1": ([*RUN, "--policy", "fraction:1.5"], "the share P must be in (0, 1]", None),
    "policy entropy infinite": ([*RUN, "--policy", "entropy:inf"], "entropy takes one threshold", None),
    "policy on a method without adapt step": (["run", "--method", "lame", "--policy", "every:2"], "has no adapt step", None),
    "policy list with --name": ([*RUN, "--policy", "every:2,4", "--name", "x"], "--name names one file", None),
    "live: several policies": (["live", "--method", "tent", "--rho", "1", "--policy", "every:2,4"], "a live run plays one policy", None),
    "list: unknown model": (["list", "--methods-for", "nosuch"], "unknown model 'nosuch'", None),
    "resume and force": ("tiny", ["--resume", "--force"], "contradict", None),
    "out empty": ("tiny-out", "", "--out is empty", None),
    "out is a file": ("tiny-out", "{ws}/notes.txt", "is a file, not a folder", None),
    "out below a file": ("tiny-out", "{ws}/notes.txt/deeper", "is a file, not a folder", None),
    "out symlink loop": ("tiny-out", "{ws}/loop-a", "symbolic links", _loop),
    "nothing to resume": ("tiny", ["--resume"], "nothing to resume", None),
    "interrupted run without --resume": ("tiny", [], "pass --resume to continue it or --force", _partial),
    "resume with other options": ("tiny", ["--resume"], "options differ from the interrupted run", _partial),
    "complete trace without --force": (
        "tiny",
        [],
        "already exists (a complete trace)",
        lambda ws: write_trace(ws / "out" / "tent-bs8.parquet", "tent", num_batches=4, episodes=("fog",), batch_size=8, num_classes=10),
    ),
    "calibrate: garbage standard.parquet": ("calibrate", [], "is not a readable trace", _garbage_standard),
    "calibrate: a tent trace named standard": ("calibrate", [], "is not the trace this run would write", _tent_as_standard),
    "demo cache below a file": (
        "env",
        ["run", "--method", "tent", "--dataset", "demo", "--domains", "fog", "--max-batches", "1", "--out", "{ws}/demo-out", "--quiet"],
        "cannot write the demo data cache",
        None,
    ),
}


# ------------------------------------------------------------------------ the user's model and images
def _byo(ws, nested=False):
    classes = ("ant", "cat", "dog", "fox")
    write_image_folder(ws / "imgs", domains=("day", "night") if nested else None, classes=classes, per_class=4, size=(8, 8))
    write_model_file(ws / "model.py")


def _byo_broken(ws):
    _byo(ws)
    (ws / "broken.py").write_text("def build(:\n")


def _byo_empty(ws):
    (ws / "empty").mkdir()


def _byo_bad_image(ws):
    _byo(ws)
    (ws / "imgs" / "cat" / "bad.png").write_bytes(b"not an image")


def _byo_map(ws):
    _byo(ws)
    (ws / "map.csv").write_text("cat,3\ndog,5\n")


BYO = ["run", "--method", "tent", "--dataset", "folder:{ws}/imgs", "--batch-size", "4", "--out", "{ws}/byo-out", "--quiet"]
CASES.update(
    {
        "model: module does not import": ([*BYO, "--model", "no_such_module_x:build"], "cannot import module 'no_such_module_x'", _byo),
        "model: file does not import": ([*BYO, "--model", "{ws}/broken.py:build"], "broken.py: SyntaxError", _byo_broken),
        "model: factory missing": ([*BYO, "--model", "{ws}/model.py:buidl"], "has no 'buidl'; close matches: build", _byo),
        "model: factory returns no module": ([*BYO, "--model", "{ws}/model.py:not_a_model"], "not a torch.nn.Module", _byo),
        "model: factory raises": ([*BYO, "--model", "{ws}/model.py:raises"], "factory raised RuntimeError", _byo),
        "model: unknown timm name": ([*BYO, "--model", "timm:mobilenetv3_smal_100"], "close matches: mobilenetv3_small_100", _byo),
        "model: unknown torchvision name": ([*BYO, "--model", "torchvision:mobilenet_v22"], "close matches: mobilenet_v2", _byo),
        "model: input size on a built-in": ([*BYO, "--model", "tiny-bn", "--input-size", "64"], "--input-size is for models by spec", _byo),
        "folder: missing": ([*BYO, "--dataset", "folder:{ws}/nope", "--model", "{ws}/model.py:build"], "no such folder", _byo),
        "folder: empty": ([*BYO, "--dataset", "folder:{ws}/empty"], "holds no class folders", _byo_empty),
        "folder: no path": ([*BYO, "--dataset", "folder:"], "needs the folder of your images", None),
        "folder: an image that does not decode": ([*BYO, "--model", "{ws}/model.py:build"], "bad.png", _byo_bad_image),
        "folder: classes do not fit the model": ([*BYO, "--model", "{ws}/model.py:build_three"], "outputs 3 classes but dataset", _byo),
        "folder: class map misses a folder": (
            [*BYO, "--model", "{ws}/model.py:build", "--class-map", "{ws}/map.csv"],
            "does not map the class folder 'ant'",
            _byo_map,
        ),
        "folder: corruptions on domain folders": (
            [*BYO, "--model", "{ws}/model.py:build", "--corruptions", "fog"],
            "--corruptions needs a folder of clean images",
            lambda ws: _byo(ws, nested=True),
        ),
        "folder: corruptions below 32 px": (
            [*BYO, "--model", "{ws}/model.py:build", "--input-size", "16", "--corruptions", "fog"],
            "at least 32 px",
            _byo,
        ),
        "folder: corruptions on a built-in dataset": (
            ["run", "--method", "tent", "--corruptions", "fog"],
            "is for --dataset folder:PATH",
            None,
        ),
        "method does not fit the model's normalisation": (
            [*BYO, "--method", "adabn", "--model", "{ws}/model.py:build_plain"],
            "needs BatchNorm layers but model",
            _byo,
        ),
        "stream: gradual on a folder without severities": (
            [*BYO, "--model", "{ws}/model.py:build", "--stream", "gradual"],
            "has no severities (a folder of clean images takes them with --corruptions)",
            lambda ws: _byo(ws, nested=True),
        ),
        "stream: gradual at severity 1": ([*RUN, "--stream", "gradual", "--severity", "1"], "needs --severity 2..5, not 1", None),
        "stream: rounds of an episodic stream": ([*RUN, "--rounds", "3"], "--rounds repeats a stream that never resets", None),
        "stream: zero rounds": ([*RUN, "--stream", "continual", "--rounds", "0"], "--rounds", None),
        "live: a mixed stream": (
            ["live", "--method", "tent", "--rho", "1", "--stream", "mixed"],
            "live plays episodic and continual",
            None,
        ),
    }
)


def _argv(case, ws):
    spec = CASES[case]
    if spec[0] == "tiny":
        return ["run", "--method", "tent", *tiny(ws, *spec[1])]
    if spec[0] == "tiny-out":
        return ["run", "--method", "tent", *tiny(ws, out=spec[1].replace("{ws}", str(ws)))]
    if spec[0] == "calibrate":
        return ["calibrate", *tiny(ws, *spec[1])]
    if spec[0] == "env":
        return [a.replace("{ws}", str(ws)) for a in spec[1]]
    if spec[0][:5] == BYO[:5]:  # the user's own model and images
        return [a.replace("{ws}", str(ws)) for a in spec[0]]
    if spec[0][:1] == ["run"]:  # the case's own values come last, so they win over the tiny defaults
        return ["run", *tiny(ws), *spec[0][1:]]
    return spec[0]


@pytest.mark.parametrize("case", list(CASES))
def test_refused_in_one_line_and_nothing_changes(case, ws, monkeypatch):
    spec = CASES[case]
    needle, setup = spec[-2], spec[-1]
    if setup is not None:
        setup(ws)
    if case == "demo cache below a file":
        monkeypatch.setenv("TEMPORA_HOME", str(ws / "notes.txt" / "cache"))
        monkeypatch.setenv("TEMPORA_DEMO_TEST_SIZE", "64")
    before = snapshot(ws)
    assert_refused(invoke(cli, _argv(case, ws)), PROG, needle, before, ws)


FAULTS = [(errno.EACCES, "permission denied"), (errno.EROFS, "read-only file system"), (errno.ENOSPC, "no space left")]
IN_USE = ([], ["--resume"], ["--force"])  # --force must not delete the holder's partial run
START_UP = [
    (["-m", "tempora_trace.cli", "--method", "tent", "--domains", "fog", "--max-batches", "1"], "tempora-trace"),
    (["-m", "tempora_sim.commands.main", "sweep", str(ROOT / "traces" / "demo")], "tempora-sim"),
]


@pytest.mark.parametrize("code,needle", FAULTS)
def test_unwritable_output_is_one_line_and_leaves_nothing(code, needle, ws, monkeypatch):
    (ws / "out").mkdir()
    before = snapshot(ws)
    calls = ("write",) if code == errno.ENOSPC else ("open", "mkdir", "rename", "replace")
    inject_errno(monkeypatch, ws / "out", code, calls)
    assert_refused(invoke(cli, ["run", "--method", "tent", *tiny(ws)]), PROG, needle, before, ws)


def test_an_output_in_use_is_refused_naming_the_holder(ws):
    _partial(ws)  # the holder's run in progress
    with output_lock(ws / "out" / "tent-bs8.parquet", "trace"):
        before = snapshot(ws)
        for extra in IN_USE:
            line = assert_refused(
                invoke(cli, ["run", "--method", "tent", *tiny(ws, *extra)]), PROG, "is being written by process", before, ws
            )
            assert str(os.getpid()) in line


def _adapt_rows(path: Path) -> list[tuple]:
    d = pq.read_table(path).to_pydict()
    keys = ("episode", "domain", "phase", "checkpoint", "step", "n", "correct", "updated")
    return sorted(zip(*(d[k] for k in keys)))


def test_full_disk_mid_run_then_resume_gives_the_rows_of_an_uninterrupted_run(ws, monkeypatch):
    two = ["--domains", "gaussian_noise,fog"]
    whole = invoke(cli, ["run", "--method", "tent", *tiny(ws, *two, out=str(ws / "whole"))])
    assert whole.exit_code == 0, whole.stderr
    # the disk fills while the second episode is written: the first stays, nothing else
    real_write = os.write

    def write(fd, data):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if "episode-0001" in target:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    full = invoke(cli, ["run", "--method", "tent", *tiny(ws, *two)])
    assert_refused(full, PROG, "no space left")
    partial = ws / "out" / "tent-bs8.partial"
    kept = {p.name for p in partial.iterdir()}
    assert {"config.json", "episode-0000.rows"} <= kept and not [n for n in kept if n.startswith("episode-0001")]
    monkeypatch.setattr(os, "write", real_write)
    # a truncated episode file (a crash while the disk was full) is traced again, with a warning
    rows = partial / "episode-0000.rows"
    rows.write_bytes(rows.read_bytes()[:100])
    resumed = invoke(cli, ["run", "--method", "tent", *tiny(ws, *two, "--resume")])
    assert resumed.exit_code == 0, resumed.stderr
    assert resumed.stderr.count("\n") == 1 and "warning:" in resumed.stderr and "damaged" in resumed.stderr
    assert _adapt_rows(ws / "out" / "tent-bs8.parquet") == _adapt_rows(ws / "whole" / "tent-bs8.parquet")
    assert not partial.exists() and not list((ws / "out").glob(".*"))


def test_outputs_take_permissions_from_the_umask(ws):
    old = os.umask(0o027)
    try:
        res = invoke(cli, ["run", "--method", "standard", *tiny(ws)])
    finally:
        os.umask(old)
    assert res.exit_code == 0, res.stderr
    assert oct((ws / "out" / "standard-bs8.parquet").stat().st_mode & 0o777) == oct(0o640)


def test_calibrate_reuses_only_the_matching_standard_trace(ws):
    assert invoke(cli, ["calibrate", *tiny(ws)]).exit_code == 0
    res = invoke(cli, ["calibrate", *tiny(ws)])
    assert res.exit_code == 0 and "using existing" in res.stdout and "λ = " in res.stdout


def test_bare_method_is_run_and_domains_take_words_or_commas(ws):
    res = invoke(cli, ["--method", "standard", *tiny(ws)[:-1], "--name", "words", "--domains", "fog", "gaussian_noise"])
    assert res.exit_code == 0, res.stderr
    res = invoke(cli, ["run", "--method", "standard", *tiny(ws), "--name", "commas", "--domains", "fog,gaussian_noise"])
    assert res.exit_code == 0, res.stderr
    assert (
        _adapt_rows(ws / "out" / "words.parquet")
        and pq.read_table(ws / "out" / "words.parquet").column("episode").unique().to_pylist()
        == pq.read_table(ws / "out" / "commas.parquet").column("episode").unique().to_pylist()
    )


# ------------------------------------------------------------------------ real processes
@pytest.mark.parametrize("argv,prog", START_UP)
def test_ctrl_c_during_start_up_is_one_line(argv, prog, tmp_path):
    proc = subprocess.Popen(
        [sys.executable, *argv], cwd=tmp_path, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    time.sleep(0.4)  # importing torch / polars / numba
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith(f"{prog}: interrupted"), err


def test_the_start_up_guard_holds_until_the_command_can_catch_the_interrupt(monkeypatch):
    """The CLI's start-up SIGINT handler (one line, exit 130) is handed back to Python's only
    inside the command's try: a Ctrl-C while the output streams are being set up is still the
    guard's, never a KeyboardInterrupt with nothing to catch it (a traceback)."""
    import tempora_toolkit.command_line as command_line

    def _interrupted_at_start_up(signum, frame):  # the name the CLIs' guard has
        raise AssertionError("not called in this test")

    seen = []
    real_streams = command_line._GuardedStreams

    def streams_recording_the_handler():
        seen.append(signal.getsignal(signal.SIGINT))
        return real_streams()

    monkeypatch.setattr(command_line, "_GuardedStreams", streams_recording_the_handler)
    previous = signal.signal(signal.SIGINT, _interrupted_at_start_up)
    try:
        group = command_line.OneLineGroup(name="prog", prog="prog")

        @group.command()
        def noop():
            seen.append(signal.getsignal(signal.SIGINT))

        assert group.run(["noop"]) == 0
    finally:
        signal.signal(signal.SIGINT, previous)
    assert seen == [_interrupted_at_start_up, signal.default_int_handler]


def test_ctrl_c_while_a_command_defines_a_class_is_one_line(capsys):
    """A Ctrl-C that lands while a command's modules define a dataclass reaches the program as
    RuntimeError("Error calling __set_name__ ...") raised from the KeyboardInterrupt (Python
    3.11): still one line and status 130. Any other RuntimeError stays the error it is."""
    from tempora_toolkit.command_line import EXIT_INTERRUPTED, OneLineGroup

    class Interrupting:
        def __set_name__(self, owner, name):
            raise KeyboardInterrupt

    group = OneLineGroup(name="prog", prog="prog")

    @group.command()
    def define():
        type("Defined", (), {"field": Interrupting()})  # as a class statement binds its attributes

    @group.command()
    def broken():
        raise RuntimeError("a defect, not an interrupt")

    assert group.run(["define"]) == EXIT_INTERRUPTED
    err = capsys.readouterr().err
    assert err == "prog: interrupted\n", err
    with pytest.raises(RuntimeError, match="a defect"):
        group.run(["broken"])


def test_the_documented_case_count_is_the_suite(hostile_modules):
    """docs/reference/errors.md states how many hostile cases the suite covers; keep it true."""
    cache, campaign, live, sim, surfaces, users = (hostile_modules[n] for n in ("cache", "campaign", "live", "sim", "surfaces", "users"))
    sim_cases = len(sim.CASES) + len(sim.FAULTS) * len(sim.COMMANDS) + len(sim.COMMANDS)  # + one held output each
    sim_cases += cache.CASE_COUNT + surfaces.SIM_CASE_COUNT + users.SIM_CASE_COUNT
    trace_cases = len(CASES) + len(FAULTS) + len(IN_USE) + 1 + len(START_UP)  # + full disk mid-run
    trace_cases += live.CASE_COUNT + campaign.CASE_COUNT + surfaces.TRACE_CASE_COUNT + users.TRACE_CASE_COUNT
    text = (ROOT / "docs" / "reference" / "errors.md").read_text(encoding="utf-8")
    assert f"**{sim_cases + trace_cases} cases**: {sim_cases}" in text and f"and {trace_cases} against" in text
