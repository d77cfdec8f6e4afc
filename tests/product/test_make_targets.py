"""Every study and demo target of the Makefile runs end to end, so a recipe cannot drift from
the CLIs it calls.

Each target runs as a user would type it, on tiny fixture data in each dataset's own on-disk
layout (ImageNet-C JPEG folders, CIFAR-10-C ``.npy`` files, a reduced demo split), with
untrained weights (``WEIGHTS=random``), a couple of batches and two methods, through the Make
variables the Makefile documents. ``PY=`` points Make at this interpreter, which skips the
install step. The suite runs under `make test`, so GNU make is always there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

# every Makefile target end to end, in make subprocesses: minutes on two cores
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CORRUPTION = "gaussian_noise"


def start_make(
    target: str, env_extra: dict[str, str] | None = None, flags: tuple[str, ...] = (), **variables: str
) -> tuple[str, subprocess.Popen]:
    """``make [FLAGS] TARGET PY=<this python> VAR=value…`` in the repository, started in the background
    (the targets of one test run side by side: most of their time is interpreter start-up)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(env_extra or {})
    argv = ["make", "--no-print-directory", *flags, "-C", str(ROOT), target, f"PY={sys.executable}"]
    argv += [f"{k}={v}" for k, v in variables.items()]
    return target, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def wait_all(runs: list[tuple[str, subprocess.Popen]]) -> None:
    failures = []
    for target, proc in runs:
        out, _ = proc.communicate(timeout=600)
        if proc.returncode != 0:
            failures.append(f"make {target} failed (exit {proc.returncode}):\n{out[-4000:]}")
    assert not failures, "\n\n".join(failures)


def imagenet_c_folder(root: Path, images: int = 4) -> Path:
    """``<root>/<corruption>/5/<wnid>/*.JPEG``: all 1000 class folders, images in a few."""
    from PIL import Image

    sev = root / CORRUPTION / "5"
    rng = np.random.default_rng(0)
    for k in range(1000):
        (sev / f"n{k:08d}").mkdir(parents=True)
    for i in range(images):
        pixels = rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(sev / f"n{i % 3:08d}" / f"ILSVRC2012_val_{i:08d}.JPEG", quality=50)
    return root


def cifar_c_folder(root: Path, per_severity: int = 4) -> Path:
    """``<root>/<corruption>.npy`` (five severities stacked) and ``<root>/labels.npy``."""
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    np.save(root / f"{CORRUPTION}.npy", rng.integers(0, 256, (5 * per_severity, 32, 32, 3), dtype=np.uint8))
    np.save(root / "labels.npy", np.tile(np.arange(per_severity) % 10, 5).astype(np.int64))
    return root


def study_variables(tmp_path: Path, data: Path) -> dict[str, str]:
    return dict(
        DATA=str(data),
        WEIGHTS="random",
        DEVICE="cpu",
        PAPER_DOMAINS=CORRUPTION,
        MAX_BATCHES="2",
        # no timing-variability pass: on two batches of ResNet-50 and ViT-B/16 it would be half
        # of each trace's cost, and `make demo` below covers the recipes with it
        TRACE_OPTS="--batch-size 2 --frozen-sample 1 --warmup-batches 0 --threads 1 --timing-sample 0 --quiet",
        # λ of an untrained network on a loaded CPU can exceed the paper's explicit T grid
        # (an error by design): fix λ, so the recipe's own grids are what is tested.
        SWEEP_OPTS="--lambda-ms 50ms",
        TRACES=str(tmp_path / "traces"),
        RESULTS=str(tmp_path / "results"),
    )


def assert_study(tmp_path: Path, study: str, trace_dir: str, methods: list[str]) -> None:
    traces = tmp_path / "traces" / trace_dir / "cpu"
    assert sorted(p.name for p in traces.glob("*.parquet")) == sorted(f"{m}.parquet" for m in methods)
    results = tmp_path / "results" / study
    assert (results / "utility.parquet").is_file() and (results / "utility.csv").is_file()
    report = (results / "report" / "report.md").read_text()
    assert all(m in report for m in methods)


def test_paper_studies_run_end_to_end(tmp_path):
    """`make paper`, `make paper-vit` and `make paper-cifar`: traces, sweep (with the paper's
    grids and budget rule) and report, each on its dataset's layout."""
    imagenet_c = imagenet_c_folder(tmp_path / "ImageNet-C")
    cifar_c = cifar_c_folder(tmp_path / "CIFAR-10-C")
    studies = [  # (target, data, trace folder, methods variable, methods)
        ("paper", imagenet_c, "imagenet-c/resnet50", "PAPER_METHODS", ["standard", "tent"]),
        ("paper-vit", imagenet_c, "imagenet-c/vit_base_patch16_224", "PAPER_VIT_METHODS", ["standard"]),
        ("paper-cifar", cifar_c, "cifar10-c/cifar-resnet18", "PAPER_CIFAR_METHODS", ["standard", "tent"]),
    ]
    runs = []
    for study, data, _, methods_var, methods in studies:
        extra = {"CIFAR_B": "--B 20ms,1s"} if study == "paper-cifar" else {}
        runs.append(start_make(study, **study_variables(tmp_path, data), **{methods_var: " ".join(methods)}, **extra))
    wait_all(runs)
    for study, _, trace_dir, _, methods in studies:
        assert_study(tmp_path, study, trace_dir, methods)


@pytest.fixture
def demo_env(tmp_path_factory) -> dict[str, str]:
    """A private demo cache with a 16-image test split: one batch per corruption."""
    return {"TEMPORA_HOME": str(tmp_path_factory.getbasetemp() / "make-demo-home"), "TEMPORA_DEMO_TEST_SIZE": "16"}


def test_demo_and_demo_traces_run_end_to_end(tmp_path, demo_env):
    """`make demo` (traces, report), `make demo-traces` (the committed set, written
    elsewhere) and `make validate` (live runs with traces alongside, then the comparison),
    side by side on one demo cache, and `make validate-gpu` on the CPU (a synthetic ImageNet-C
    folder, ResNet-18 with random weights). Timings mean nothing here: the validation's tolerances are
    opened wide, so what is tested is that the recipe runs and writes its report."""
    common = dict(DEMO_MODELS="demo-resnet", DEMO_METHODS="standard tent")
    wait_all(
        [
            start_make(
                "demo",
                demo_env,
                **common,
                DEMO_DOMAINS=CORRUPTION,
                DEMO_OUT=str(tmp_path / "demo"),
                DEMO_TRACE_OPTS="--batch-size 16 --frozen-sample 1 --warmup-batches 0 --threads 1 --idle-settle 0 --quiet",
            ),
            start_make(
                "demo-traces",
                demo_env,
                **common,
                DEMO_SET=str(tmp_path / "set"),
                DEMO_SET_DOMAINS=CORRUPTION,
                DEMO_SET_TRACE_OPTS="--batch-size 16 --frozen-sample 1 --warmup-batches 0 --threads 1 --timing-sample 0 --quiet",
            ),
            start_make(
                "validate",
                demo_env,
                VALIDATE_METHODS="standard tent",
                VALIDATE_OPTS=f"--dataset demo --model demo-resnet --device cpu --domains {CORRUPTION} --batch-size 8 "
                "--max-batches 2 --threads 1 --warmup-batches 0 --idle-settle 0 --force --quiet",
                VALIDATE_RHO="1",
                VALIDATE_B="0ms",
                VALIDATE_REPEATS="1",
                VALIDATE_BASELINE_REPEATS="1",
                VALIDATE_POLICY_REPEATS="1",
                VALIDATE_TRACE_OPTS="--frozen-sample 1",
                VALIDATE_CHECK_OPTS="--tol-pp 100 --amortised-tol-pp 100 --min-agreement 0 --tie-us 1e9 --clock-tol-pct 1000",
                VALIDATE_OUT=str(tmp_path / "validate"),
            ),
            start_make(
                "validate-clock",
                demo_env,
                CLOCK_METHODS="standard tent",
                CLOCK_OPTS=f"--dataset demo --model demo-resnet --device cpu --domains {CORRUPTION} --batch-size 8 "
                "--max-batches 2 --threads 1 --warmup-batches 0 --idle-settle 0 --force",
                CLOCK_RHO="1,0.5",
                CLOCK_REPEATS="1",
                VALIDATE_TRACE_OPTS="--frozen-sample 1",
                VALIDATE_CHECK_OPTS="--tol-pp 100 --min-agreement 0 --tie-us 1e9 --clock-tol-pct 1000",
                CLOCK_OUT=str(tmp_path / "validate-clock"),
            ),
            start_make(
                "validate-gpu",
                demo_env,
                GPU_DEVICE="cpu",
                GPU_MODEL="resnet18",
                GPU_BATCHES="2",
                GPU_BATCH_SIZE="4",
                GPU_DOMAINS=CORRUPTION,
                GPU_DATA=str(tmp_path / "synthetic"),
                GPU_VALIDATE_OUT=str(tmp_path / "validate-gpu"),
                GPU_OPTS="--threads 1 --warmup-batches 0 --idle-settle 0 --quiet",
                GPU_TRACE_OPTS="--frozen-sample 1 --timing-sample 2",
                VALIDATE_B="0ms",
                # what validate-gpu adds to validate is its data and model (synthetic ImageNet-C
                # JPEGs, a torchvision network): `standard` alone runs them; the adapting method
                # and the policy run through the same recipe in `make validate` above
                VALIDATE_METHODS="standard",
                VALIDATE_POLICY="",
                VALIDATE_RHO="1",
                VALIDATE_REPEATS="1",
                VALIDATE_BASELINE_REPEATS="1",
                VALIDATE_CHECK_OPTS="--tol-pp 100 --amortised-tol-pp 100 --min-agreement 0 --tie-us 1e9 --clock-tol-pct 1000",
            ),
        ]
    )
    gpu = tmp_path / "validate-gpu"
    assert len(list((tmp_path / "synthetic" / CORRUPTION / "5").rglob("*.JPEG"))) == 8
    assert sorted(p.name for p in (gpu / "live").glob("*.parquet")) == ["standard-bs4.live.parquet"]
    assert (gpu / "report" / "validation.csv").read_text().count("imagenet-c") >= 1
    validation = tmp_path / "validate"
    # the methods, and tent under the sparse-adaptation policy every:2 (VALIDATE_POLICY)
    assert sorted(p.name for p in (validation / "live").glob("*.parquet")) == [
        "standard-bs8.live.parquet",
        "tent-bs8.live.parquet",
        "tent@every2-bs8.live.parquet",
    ]
    assert sorted(p.name for p in (validation / "traces").glob("*.parquet")) == [
        "standard-bs8.parquet",
        "tent-bs8.parquet",
        "tent@every2-bs8.parquet",
    ]
    assert (validation / "report" / "validation.csv").is_file()
    # the clock sandwich: traces before, live runs, traces after, and a validation against each,
    # its clock check on both sides' mean
    clock = tmp_path / "validate-clock"
    assert sorted(p.name for p in (clock / "traces-after").glob("*.parquet")) == ["standard-bs8.parquet", "tent-bs8.parquet"]
    # method after method: standard's sandwich is closed before tent is first traced
    written = {
        f"{side}/{m}": (clock / side / f"{m}-bs8.parquet").stat().st_mtime_ns
        for side in ("traces", "traces-after")
        for m in ("standard", "tent")
    }
    assert written["traces/standard"] < written["traces-after/standard"] < written["traces/tent"] < written["traces-after/tent"]
    for report, other in (("report", "traces-after"), ("report-after", "traces")):
        table = pl.read_csv(clock / report / "validation.csv")
        assert sorted(table["method"].to_list()) == ["standard", "standard", "tent", "tent"]
        for col in ("clock_gap_idle_pct", "clock_gap_idle_other_pct", "clock_gap_sandwich_pct", "clock_pass"):
            assert table[col].null_count() == 0, col
        assert all(Path(p).parent.name == other for p in table["trace_other"].to_list())
    for folder in (tmp_path / "demo" / "traces", tmp_path / "set"):
        written = folder / "demo-resnet" / "cpu"
        assert sorted(p.name for p in written.glob("*.parquet")) == ["standard.parquet", "tent.parquet"]
    assert "tent" in (tmp_path / "demo" / "report" / "report.md").read_text()


def test_predict_validate_runs_end_to_end(tmp_path, demo_env):
    """`make predict-validate` on a 16-image demo split (four batches of 4 per corruption, profiles
    of 2): traces and profiles at one and two threads, each predicted from the other and checked.
    Timings mean nothing here: what is tested is that the recipe runs and writes its checks."""
    out = tmp_path / "pv"
    wait_all(
        [
            start_make(
                "predict-validate",
                demo_env,
                PV_OUT=str(out),
                PV_MODELS="demo-resnet",
                PV_METHODS="standard tent",
                PV_DOMAINS="gaussian_noise fog",
                PV_OPTS="--dataset demo --device cpu --quiet --batch-size 4 --warmup-batches 0 --timing-sample 4 --idle-settle 0",
                PV_TRACE_OPTS="--frozen-sample 1",
                PV_PROFILE_OPTS="--profile-batches 2",
                PV_VALIDATE_OPTS="--resamples 100 --timing-replicates 1",
            )
        ]
    )
    for thr in ("1thr", "2thr"):
        for kind in ("traces", "profiles"):
            assert sorted(p.name for p in (out / kind / thr / "demo-resnet").glob("*.parquet")) == ["standard.parquet", "tent.parquet"]
    for pair in ("1to2", "2to1"):
        text = (out / f"validation-{pair}.txt").read_text()
        assert "same winner" in text and "method-median" in text and "speed-probe" in text
        assert len(list((out / "predicted" / pair).rglob("*.parquet"))) == 2
    assert (out / "wall.tsv").read_text().count("profile ") == 4


def test_field_study_runs_end_to_end(tmp_path, demo_env):
    """`make field` with two methods (one of the field's), a long continual stream and the mixed
    one, on one corruption of a 16-image demo split: a trace per stream and method (the rounds
    taken from the stream folder's name), one sweep, one report group per stream, the page."""
    from tempora_schema import PHASE_ADAPT

    out = tmp_path / "field"
    # stream folder → the stream as the trace and the report name it, and its adapt events
    # (batches of 4 of 16 images, at most 3 per domain: 3 per round, 2 rounds; mixed: 3 × 1 domain)
    streams = {"continual-x2": ("continual:x2", 6), "mixed": ("mixed", 3)}
    methods = ["standard", "t3a"]
    wait_all(
        [
            start_make(
                "field",
                demo_env,
                FIELD_METHODS=" ".join(methods),
                FIELD_STREAMS=" ".join(streams),
                FIELD_DOMAINS=CORRUPTION,
                FIELD_OUT=str(out),
                FIELD_TRACE_OPTS="--batch-size 4 --max-batches 3 --frozen-sample 1 --warmup-batches 0 --threads 1 --quiet",
            )
        ]
    )
    for folder, (_, adapt_events) in streams.items():
        written = out / "traces" / "demo-resnet" / folder
        assert sorted(p.name for p in written.glob("*.parquet")) == [f"{m}.parquet" for m in methods]
        for trace in written.glob("*.parquet"):
            assert pl.read_parquet(trace).filter(pl.col("phase") == PHASE_ADAPT).height == adapt_events, trace
    utility = pl.read_parquet(out / "utility.parquet")
    assert (out / "utility.csv").is_file() and (out / "explore.html").is_file()
    # every protocol swept, every method in every stream's group
    assert {"offline", "discrete", "continuous", "amortised"} <= set(utility["protocol"].unique().to_list())
    pairs = sorted(utility.select("stream", "method").unique().iter_rows())
    assert pairs == sorted((stream, m) for stream, _ in streams.values() for m in methods)
    # the report: one group per stream, each heading naming its stream
    headings = [line for line in (out / "report" / "report.md").read_text().splitlines() if line.startswith("## Group ")]
    assert len(headings) == len(streams)
    for stream, _ in streams.values():
        assert sum(f"/{stream}/" in h for h in headings) == 1, (stream, headings)


def test_field_dry_run_lists_every_trace_of_the_defaults(tmp_path):
    """`make -n field` with the defaults: one trace per stream (a long continual one, the
    mixed and the gradual) and per method that fits demo-resnet, the paper's and the field's."""
    from tempora_trace.methods import FIELD_METHODS, methods_for_model

    out = tmp_path / "field"
    _, proc = start_make("field", flags=("-n",), FIELD_OUT=str(out))
    listing, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, listing
    methods = methods_for_model("demo-resnet")
    assert set(FIELD_METHODS) <= set(methods) and {"standard", "tent", "cmf"} <= set(methods)
    expected = {out / "traces" / "demo-resnet" / s / f"{m}.parquet" for s in ("continual-x3", "mixed", "gradual") for m in methods}
    missing = [str(p) for p in expected if f" {p}" not in listing and f"'{p}" not in listing]
    assert not missing, missing
    assert listing.count("tempora_trace.cli run --dataset demo --model demo-resnet") == len(expected)
    # each trace's command: its stream and rounds, parsed from the folder's name
    commands = [line for line in listing.splitlines() if "--stream" in line]
    assert sum("--stream continual --rounds 3" in c for c in commands) == len(methods)
    assert sum("--stream mixed " in c or c.rstrip().endswith("--stream mixed") for c in commands) == len(methods)
    assert sum("--stream gradual" in c for c in commands) == len(methods)
