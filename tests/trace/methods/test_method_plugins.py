"""Methods from outside the package: the example distribution in examples/ installed into a
temporary folder is found through its entry point (listed without importing), traced on the
demo data beside a built-in, swept and reported; ``module:CLASS`` and ``PATH.py:CLASS`` specs
trace with their provenance in the metadata and the identity; bad plugins and specs are one
line and exit status 2 with nothing written; a plugin raising mid-trace keeps the complete
episodes for --resume."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import tempora_schema as schema
from tempora_trace import methods as registry
from tempora_trace.cli import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "tempora-example-method"
EXAMPLE_FILE = EXAMPLE / "src" / "tempora_example_method" / "pseudo_label.py"


def _pip_target(source: Path, target: Path) -> None:
    """``pip install --no-deps --no-build-isolation --target`` from a copy (the build leaves
    build/ and *.egg-info beside the sources)."""
    copy = target.parent / f"src-{source.name}"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(copy),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """The example distribution installed into a temporary folder (not the environment)."""
    site = tmp_path_factory.mktemp("plugin-site") / "site"
    _pip_target(EXAMPLE, site)
    assert (site / "tempora_example_method-0.1.0.dist-info").is_dir()
    return site


@pytest.fixture
def on_path(monkeypatch):
    """Put folders on sys.path (and PYTHONPATH, for subprocesses) for one test; the
    entry-point cache and the modules imported from them are forgotten afterwards."""
    before = set(sys.modules)
    added: list[str] = []

    def add(*folders: Path) -> dict[str, str]:
        for folder in folders:
            monkeypatch.syspath_prepend(str(folder))
            added.append(str(folder))
        registry.refresh_entry_points()
        return {**os.environ, "PYTHONPATH": os.pathsep.join([*added, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}

    yield add
    for name in set(sys.modules) - before:
        if name.startswith(("tempora_example_method", "tempora_user_code_", "byo_")):
            del sys.modules[name]
    registry.refresh_entry_points()


@pytest.fixture
def small_demo_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.getbasetemp() / "tempora-home-demo"
    monkeypatch.setenv("TEMPORA_HOME", str(home))
    monkeypatch.setenv("TEMPORA_DEMO_TEST_SIZE", "64")
    return home


def _trace_args(method: str, out: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--method",
        method,
        "--dataset",
        "demo",
        "--domains",
        "gaussian_noise",
        "--max-batches",
        "3",
        "--batch-size",
        "16",
        "--frozen-sample",
        "1",
        "--warmup-batches",
        "1",
        "--threads",
        "1",
        "--out",
        str(out),
        "--quiet",
        *extra,
    ]


def _meta(path: Path) -> dict:
    table = pq.read_table(path)
    meta = schema.decode_metadata(table.schema, path)
    schema.validate_table(table, meta, path)
    return meta


# ------------------------------------------------------------------------ the example package
@pytest.mark.e2e
@pytest.mark.slow
def test_installed_example_is_traced_swept_and_reported_beside_a_built_in(plugin_site, on_path, small_demo_home, tmp_path, capsys):
    env = on_path(plugin_site)
    assert "pseudo-label" in registry.available_methods()
    assert "tempora_example_method" not in sys.modules  # listed, not imported
    assert registry.plugin_methods()["pseudo-label"][0].distribution == "tempora-example-method"

    out = tmp_path / "traces"
    # a fresh process finds the plugin through its entry point, as a user's shell would
    listing = subprocess.run([sys.executable, "-m", "tempora_trace.cli", "list"], capture_output=True, text=True, env=env)
    assert listing.returncode == 0 and "plugin methods: pseudo-label (tempora-example-method 0.1.0)" in listing.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "tempora_trace.cli", *_trace_args("pseudo-label", out)], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert main(_trace_args("standard", out)) == 0

    plugin, builtin = _meta(out / "pseudo-label-bs16.parquet"), _meta(out / "standard-bs16.parquet")
    assert plugin["method"] == "pseudo-label"
    assert plugin["method_source"] == {
        "kind": "distribution",
        "distribution": "tempora-example-method",
        "version": "0.1.0",
        "object": "tempora_example_method.pseudo_label:PseudoLabel",
    }
    assert schema.TraceIdentity.from_metadata(plugin).as_metadata()["method_source"] == plugin["method_source"]
    assert "method_source" not in builtin and set(plugin) - set(builtin) == {"method_source"}

    from tempora_sim.commands.main import main as sim

    capsys.readouterr()
    assert sim.main(["sweep", str(out), "--protocol", "offline", "--format", "json"], standalone_mode=False) == 0
    rows = json.loads(capsys.readouterr().out)
    utility = {r["method"]: r["utility"] for r in rows}
    assert set(utility) == {"pseudo-label", "standard"} and all(0 <= u <= 1 for u in utility.values())
    assert sim.main(["report", str(out), "--out", str(tmp_path / "report")], standalone_mode=False) == 0
    assert "pseudo-label" in (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    capsys.readouterr()


@pytest.mark.e2e
@pytest.mark.slow
def test_the_example_packages_own_test_calls_the_kit(plugin_site, on_path):
    env = on_path(plugin_site)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE / "tests")],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(plugin_site.parent),
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "3 passed" in proc.stdout


# ------------------------------------------------------------------------ specs
def test_file_and_module_specs_record_their_provenance(plugin_site, on_path, small_demo_home, tmp_path, capsys):
    on_path()
    copy = tmp_path / "my_method.py"
    copy.write_bytes(EXAMPLE_FILE.read_bytes())
    out = tmp_path / "traces"
    assert main(_trace_args(f"{copy}:PseudoLabel", out)) == 0
    meta = _meta(out / "pseudo-label-bs16.parquet")
    digest = registry._registry.file_sha256(copy)
    assert meta["method_source"] == {"kind": "file", "path": str(copy.resolve()), "sha256": digest, "object": "PseudoLabel"}

    # once the distribution is installed, its module spec is that distribution's method, and
    # a file declaring the same name is a clash naming both
    on_path(plugin_site)
    ref = registry.resolve_method("tempora_example_method.pseudo_label:PseudoLabel")
    assert ref.name == "pseudo-label" and ref.source.kind == "distribution" and ref.source.version == "0.1.0"
    capsys.readouterr()
    assert main(_trace_args(f"{copy}:PseudoLabel", tmp_path / "other")) == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and "is claimed by distribution tempora-example-method 0.1.0" in line and f"by file {copy.resolve()}" in line


def test_resume_refuses_a_method_file_that_changed(on_path, small_demo_home, tmp_path):
    spec_file = tmp_path / "byo_method.py"
    spec_file.write_text(EXAMPLE_FILE.read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "traces"
    from tempora_trace.config import TraceConfig
    from tempora_trace.runner import trace_run

    class Killed(Exception):
        pass

    def kill(index, name):
        raise Killed

    cfg = TraceConfig(
        method=f"{spec_file}:PseudoLabel",
        dataset="demo",
        domains=["gaussian_noise", "fog"],
        max_batches=2,
        batch_size=16,
        out=str(out),
        quiet=True,
        threads=1,
        warmup_batches=1,
    )
    with pytest.raises(Killed):
        trace_run(cfg, on_episode_end=kill)
    spec_file.write_text(spec_file.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    from tempora_trace.errors import OutputError

    with pytest.raises(OutputError, match=r"options differ.*method_source"):
        trace_run(TraceConfig(**{**cfg.__dict__, "resume": True}))


# ------------------------------------------------------------------------ bad input
BROKEN_IMPORT = "import numpy\nraise RuntimeError('plugin exploded at import')\n"
NOT_A_METHOD = "class Helper:\n    name = 'helper'\n"
CLASHING = (
    "from tempora_trace.methods import TTAMethod\n\n"
    "class Tent(TTAMethod):\n    name = 'tent'\n    family = 'baseline'\n\n"
    "    def predict(self, x):\n        return self.model(x)\n"
)


@pytest.mark.parametrize(
    "source, spec, expected",
    [
        (BROKEN_IMPORT, "{file}:Anything", r"cannot import method file .*broken\.py: RuntimeError: plugin exploded at import"),
        (NOT_A_METHOD, "{file}:Missing", r"no class 'Missing' in .*broken\.py; it defines no TTAMethod subclass"),
        (NOT_A_METHOD, "{file}:Helper", r"is not a method: a class, not a subclass of tempora_trace\.methods\.TTAMethod"),
        (
            CLASHING,
            "{file}:Tent",
            r"method name 'tent' is claimed by the built-in tempora_trace\.methods\.tent:Tent and by file .*broken\.py",
        ),
        (None, "{dir}/absent.py:Cls", r"method file .*absent\.py not found"),
        (None, "no_such_package_xyz.module:Cls", r"no module named 'no_such_package_xyz\.module'"),
    ],
)
def test_bad_specs_are_one_line_and_write_nothing(source, spec, expected, on_path, tmp_path, capsys):
    on_path()
    file = tmp_path / "broken.py"
    if source is not None:
        file.write_text(source, encoding="utf-8")
    out = tmp_path / "out"
    assert main(_trace_args(spec.format(file=file, dir=tmp_path), out)) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tempora-trace: error: "), err
    import re

    assert re.search(expected, lines[0]), lines[0]
    assert not out.exists()


def test_debug_shows_the_traceback_behind_the_line(on_path, tmp_path, capsys):
    on_path()
    file = tmp_path / "broken.py"
    file.write_text(BROKEN_IMPORT, encoding="utf-8")
    assert main(["--debug", *_trace_args(f"{file}:Anything", tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "plugin exploded at import" in err
    assert err.strip().splitlines()[-1].startswith("tempora-trace: error: cannot import method file")


def _dist_info(site: Path, dist: str, entry_points: dict[str, str], modules: dict[str, str] | None = None) -> None:
    """A minimal installed distribution: METADATA and entry_points.txt in a dist-info folder."""
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n", encoding="utf-8")
    lines = ["[tempora.methods]", *(f"{k} = {v}" for k, v in entry_points.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for name, text in (modules or {}).items():
        (site / f"{name}.py").write_text(text, encoding="utf-8")


def test_entry_point_clashes_and_broken_plugins_are_one_line(on_path, tmp_path, capsys):
    site = tmp_path / "site"
    _dist_info(site, "byo-one", {"tent": "byo_one:Tent", "shared": "byo_one:Shared"}, {"byo_one": BROKEN_IMPORT})
    _dist_info(site, "byo-two", {"shared": "byo_two:Shared", "exploding": "byo_two:X"}, {"byo_two": BROKEN_IMPORT})
    on_path(site)
    # listed from metadata, nothing imported
    assert {"shared", "exploding"} <= set(registry.available_methods()) and "byo_two" not in sys.modules
    assert main(["list"]) == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and "method name 'shared' is claimed by distribution byo-one 1.0" in line and "distribution byo-two 1.0" in line
    assert main(_trace_args("tent", tmp_path / "out")) == 2
    line = capsys.readouterr().err.strip()
    assert "the built-in tempora_trace.methods.tent:Tent and by distribution byo-one 1.0 (byo_one:Tent)" in line
    assert main(_trace_args("exploding", tmp_path / "out")) == 2
    line = capsys.readouterr().err.strip()
    assert "cannot import method module 'byo_two'" in line and "RuntimeError: plugin exploded at import" in line
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------ a plugin failing mid-trace
RAISING = '''
import os

import torch

from tempora_trace.methods import TTAMethod


class Flaky(TTAMethod):
    """Entropy-free stand-in that raises in adapt on the fog episode when BYO_BOOM is set."""

    name = "flaky"
    family = "baseline"

    def predict(self, x):
        self.domain_mean = float(x.mean())  # host read, harmless here
        with torch.no_grad():
            return self.model(x)

    def adapt(self):
        self.steps = getattr(self, "steps", 0) + 1
        if os.environ.get("BYO_BOOM") and self.steps > 4:
            raise ValueError("adapt blew up")
'''


def test_a_plugin_raising_mid_trace_is_one_line_and_keeps_complete_episodes(on_path, small_demo_home, tmp_path, capsys, monkeypatch):
    on_path()
    file = tmp_path / "flaky.py"
    file.write_text(RAISING, encoding="utf-8")
    out = tmp_path / "out"
    args = _trace_args(f"{file}:Flaky", out, "--domains", "gaussian_noise,fog", "--warmup-batches", "0", "--no-default-checkpoints")
    monkeypatch.setenv("BYO_BOOM", "1")
    assert main(args) == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line
    assert f"method 'flaky' (file {file.resolve()} (Flaky)) raised in adapt at episode fog step 1: ValueError: adapt blew up" in line
    assert "complete episodes are kept for --resume" in line
    partial = out / "flaky-bs16.partial"
    assert sorted(p.name for p in partial.glob("episode-*.rows")) == ["episode-0000.rows"]
    monkeypatch.delenv("BYO_BOOM")
    assert main([*args, "--resume"]) == 0
    meta = _meta(out / "flaky-bs16.parquet")
    assert meta["domains"] == ["gaussian_noise", "fog"] and meta["method_source"]["kind"] == "file"


# ------------------------------------------------------------------------ campaigns
CAMPAIGN = """
[campaign]
name = "byo"
out = "traces"

[[groups]]
dataset = "demo"
model = "demo-resnet"
batch_size = 16
methods = ["tent", "methods/my_method.py:PseudoLabel"]
domains = ["gaussian_noise"]
options = { max_batches = 2, threads = 1 }
params = { "methods/my_method.py:PseudoLabel" = { lr = 0.001 } }
"""


def test_campaign_files_take_method_specs_relative_to_the_file(on_path, tmp_path):
    from tempora_trace.campaign import CampaignError, load_campaign, trace_location

    on_path()
    (tmp_path / "methods").mkdir()
    spec_file = tmp_path / "methods" / "my_method.py"
    spec_file.write_bytes(EXAMPLE_FILE.read_bytes())
    path = tmp_path / "c.toml"
    path.write_text(CAMPAIGN, encoding="utf-8")
    campaign = load_campaign(path)
    methods = [t.method for t in campaign.tasks]
    assert methods == ["standard", "tent", f"{spec_file.resolve()}:PseudoLabel"]
    plugin = campaign.tasks[2]
    assert dict(plugin.params) == {"lr": 0.001}
    argv = plugin.argv(campaign.out)
    assert argv[argv.index("--method") + 1] == f"{spec_file.resolve()}:PseudoLabel" and "lr=0.001" in argv
    assert trace_location(plugin, campaign.out).name == "pseudo-label-bs16.parquet"

    path.write_text(CAMPAIGN.replace("my_method.py:PseudoLabel", "missing.py:PseudoLabel"), encoding="utf-8")
    with pytest.raises(CampaignError) as info:
        load_campaign(path)
    assert "groups[0]: method file" in str(info.value) and "missing.py not found" in str(info.value) and "\n" not in str(info.value)
