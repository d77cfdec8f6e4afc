"""Hostile input from what users bring: their methods (predictions that cannot be scored, code
that exits or parses arguments, helpers beside the method file), their models and images
(decoder modes, decompression bombs, links, class maps), and names from the data that reach
report.md, the terminal and the page. Every refused case is one stderr line, exit status 2, no
traceback and the workspace byte for byte as it was (tests/product/hostile/hostile.py); the rest
check the documented correct result. In-process on the tiny CIFAR-C layout, the tiny BN model
and tiny image folders, so a case costs a second or two."""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import struct
import uuid
import warnings
import zlib
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from helpers.byo import write_image_folder, write_model_file
from helpers.cifar import tiny_cifar_args
from helpers.hostile import assert_refused, invoke, snapshot, user_workspace
from tempora_schema import METADATA_KEY
from tempora_sim.sweeps.synthetic import PROFILES, write_trace, write_trace_set
from tempora_trace.cli import cli

PROG = "tempora-trace"

pytestmark = pytest.mark.usefixtures("one_thread", "tiny_models")

#: Methods whose ``predict`` returns what cannot be scored as (n, 10) finite logits on the CPU,
#: one that exits, one that adapts (for a policy), one with a NaN default and one whose name is
#: too long to name a trace.
BAD_METHODS = '''
import os
import sys

import torch

from tempora_trace.methods import TTAMethod


class _Wrong(TTAMethod):
    family = "baseline"

    def wrong(self, z):
        return z

    def predict(self, x):
        with torch.no_grad():
            return self.wrong(self.model(x))


class Short(_Wrong):
    name = "bad-short"

    def wrong(self, z):
        return z[:1]


class Wide(_Wrong):
    name = "bad-wide"

    def wrong(self, z):
        return torch.cat([z, z[:, :5]], 1)


class Narrow(_Wrong):
    name = "bad-narrow"

    def wrong(self, z):
        return z[:, :3]


class Flat(_Wrong):
    name = "bad-flat"

    def wrong(self, z):
        return z[:, 0]


class AllNaN(_Wrong):
    name = "bad-nan"

    def wrong(self, z):
        return torch.full_like(z, float("nan"))


class Infinite(_Wrong):
    name = "bad-inf"

    def wrong(self, z):
        return z.masked_fill(torch.arange(z.shape[1]) == 3, float("inf"))


class Complex(_Wrong):
    name = "bad-complex"

    def wrong(self, z):
        return z.to(torch.complex64)


class Boolean(_Wrong):
    name = "bad-bool"

    def wrong(self, z):
        return z > 0


class Meta(_Wrong):
    name = "bad-meta"

    def wrong(self, z):
        return z.to("meta")


class Pair(_Wrong):
    name = "bad-tuple"

    def wrong(self, z):
        return (z, z)


class Numpy(_Wrong):
    name = "bad-numpy"

    def wrong(self, z):
        return z.numpy()


class Nothing(_Wrong):
    name = "bad-none"

    def wrong(self, z):
        return None


class LateNaN(_Wrong):
    """Fine for two adapting batches of an episode, NaN from the third on (a model that
    diverged mid-stream); frozen forwards are not counted."""

    name = "late-nan"
    seen = 0

    def reset(self):
        super().reset()
        type(self).seen = 0

    def wrong(self, z):
        if not self.frozen:
            type(self).seen += 1
        return z if type(self).seen <= 2 else torch.full_like(z, float("nan"))


class Exits(_Wrong):
    name = "exits"

    def wrong(self, z):
        sys.exit(0)


class Adapter(_Wrong):
    name = "adapter"

    def adapt(self):
        self.last_updated = True


class NaNDefault(_Wrong):
    name = "nan-default"

    @classmethod
    def default_params(cls, context):
        return {"scale": float("nan")}


class LongName(_Wrong):
    name = "m" * 600


class TentPaper(_Wrong):
    name = "tent-paper"
'''

#: A method file that parses arguments when imported, as scripts do.
ARGV_METHOD = """
import argparse

import torch

from tempora_trace.methods import TTAMethod

options = argparse.ArgumentParser().parse_args()  # reads sys.argv[1:]


class Plain(TTAMethod):
    name = "argv-plain"
    family = "baseline"

    def predict(self, x):
        with torch.no_grad():
            return self.model(x)
"""

#: Factories that exit, build on the meta device, or state an absurd input size.
MORE_FACTORIES = """
import sys

import torch
import torch.nn as nn


def exits(num_classes=10):
    sys.exit(1)


def on_meta(num_classes=10):
    with torch.device("meta"):
        return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, num_classes))


def huge_input(num_classes=10):
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, num_classes))
    net.input_size = 100000
    return net
"""


@pytest.fixture
def ws(cifar_c_root: Path, monkeypatch) -> Path:
    ws = user_workspace(cifar_c_root, monkeypatch)
    (ws / "bad.py").write_text(BAD_METHODS)
    (ws / "argv_method.py").write_text(ARGV_METHOD)
    (ws / "exits_at_import.py").write_text("import sys\nsys.exit(3)\n")
    (ws / "factories.py").write_text(MORE_FACTORIES)
    return ws


def tiny(ws: Path, *extra) -> list[str]:
    return tiny_cifar_args(ws / "cifar-c", str(ws / "out"), *extra)


# ------------------------------------------------------------------------ the user's images
def _byo(ws: Path, nested: bool = False) -> None:
    write_image_folder(
        ws / "imgs", domains=("day", "night") if nested else None, classes=("ant", "cat", "dog", "fox"), per_class=4, size=(8, 8)
    )
    write_model_file(ws / "model.py")


def _replace_image(ws: Path, write) -> None:
    """``imgs/cat/000.png`` replaced (the folder keeps its 16 images, so every one is in a batch)."""
    _byo(ws)
    (ws / "imgs" / "cat" / "000.png").unlink()
    write(ws / "imgs" / "cat")


def _png_claiming(path: Path, width: int, height: int) -> None:
    """A valid 1 x 1 PNG whose header then claims ``width`` x ``height`` (CRC fixed)."""
    from PIL import Image

    Image.new("L", (1, 1)).save(path)
    data = bytearray(path.read_bytes())
    ihdr = 8 + 8  # signature, then the IHDR chunk's length and type
    data[ihdr : ihdr + 8] = struct.pack(">II", width, height)
    data[ihdr + 13 : ihdr + 17] = struct.pack(">I", zlib.crc32(bytes(data[ihdr - 4 : ihdr + 13])) & 0xFFFFFFFF)
    path.write_bytes(bytes(data))


def _thin_png(folder: Path) -> None:
    from PIL import Image

    Image.new("RGB", (60_000, 1)).save(folder / "thin.png")


def _float_tiff(folder: Path) -> None:
    from PIL import Image

    Image.fromarray(np.linspace(0, 3, 64, dtype=np.float32).reshape(8, 8)).save(folder / "float.tif")  # mode F


def _loop(ws: Path) -> None:
    _byo(ws)
    os.symlink(ws / "imgs" / "cat" / "b.png", ws / "imgs" / "cat" / "a.png")
    os.symlink(ws / "imgs" / "cat" / "a.png", ws / "imgs" / "cat" / "b.png")


def _dangling(ws: Path) -> None:
    _byo(ws)
    os.symlink(ws / "nowhere.png", ws / "imgs" / "cat" / "gone.png")


def _map(text: str):
    def setup(ws: Path) -> None:
        _byo(ws)
        (ws / "map.csv").write_text(text, encoding="utf-8")

    return setup


def _not_utf8_domain(ws: Path) -> None:
    _byo(ws, nested=True)
    os.rename(os.fsencode(ws / "imgs" / "night"), os.fsencode(ws / "imgs") + b"/n\xffght")


BYO = ["run", "--method", "tent", "--dataset", "folder:{ws}/imgs", "--batch-size", "4", "--out", "{ws}/byo-out", "--quiet"]
MODEL = ["--model", "{ws}/model.py:build"]
RUN = ["run", "--method"]
WRONG = "returned a prediction at the warm-up that cannot be scored"

CASES = {
    # (1) predictions that cannot be scored: every kind, one line naming the method and the step
    "prediction for one sample of a batch": (
        [*RUN, "{ws}/bad.py:Short"],
        f"'bad-short' (file {{ws}}/bad.py (Short)) {WRONG}: shape (1, 10) for a batch of 8, not (8, 10)",
        None,
    ),
    "prediction with extra columns": ([*RUN, "{ws}/bad.py:Wide"], f"{WRONG}: shape (8, 15) for a batch of 8, not (8, 10)", None),
    "prediction with too few columns": ([*RUN, "{ws}/bad.py:Narrow"], f"{WRONG}: shape (8, 3)", None),
    "prediction 1-D": ([*RUN, "{ws}/bad.py:Flat"], f"{WRONG}: shape (8,)", None),
    "prediction all NaN": ([*RUN, "{ws}/bad.py:AllNaN"], f"{WRONG}: values that are NaN or infinite", None),
    "prediction holding inf": ([*RUN, "{ws}/bad.py:Infinite"], f"{WRONG}: values that are NaN or infinite", None),
    "prediction complex": ([*RUN, "{ws}/bad.py:Complex"], f"{WRONG}: dtype complex64, not a real floating-point type", None),
    "prediction bool": ([*RUN, "{ws}/bad.py:Boolean"], f"{WRONG}: dtype bool", None),
    "prediction on the meta device": ([*RUN, "{ws}/bad.py:Meta"], f"{WRONG}: a tensor on device meta, not on the run's device cpu", None),
    "prediction a tuple": ([*RUN, "{ws}/bad.py:Pair"], f"{WRONG}: a tuple, not a tensor", None),
    "prediction a numpy array": ([*RUN, "{ws}/bad.py:Numpy"], f"{WRONG}: a ndarray, not a tensor", None),
    "prediction None": ([*RUN, "{ws}/bad.py:Nothing"], f"{WRONG}: a NoneType, not a tensor", None),
    "prediction NaN from the third batch": (
        [*RUN, "{ws}/bad.py:LateNaN", "--warmup-batches", "0", "--no-default-checkpoints"],
        "returned a prediction at episode fog step 2 that cannot be scored: values that are NaN or infinite",
        None,
    ),
    # SystemExit from the user's code, argv, defaults, nesting, names
    "method file exits at import": ([*RUN, "{ws}/exits_at_import.py:X"], "exits_at_import.py: SystemExit: 3", None),
    "method exits inside predict": ([*RUN, "{ws}/bad.py:Exits"], "raised in predict at the warm-up: SystemExit: 0 (nothing written", None),
    "plugin default NaN": (
        [*RUN, "{ws}/bad.py:NaNDefault"],
        "method 'nan-default' options (its defaults included): nan is not a finite number",
        None,
    ),
    "param nested 5000 deep": (
        ["run", "--method", "tent", "--param", "x=" + "[" * 5000 + "]" * 5000],
        "nested more than 32 levels deep",
        None,
    ),
    "method name of 600 characters": ([*RUN, "{ws}/bad.py:LongName"], "with 600 characters, more than the 512 a name may have", None),
    "model label of 5,000 characters": (
        ["run", "--method", "tent", "--model", "{ws}/factories.py:" + "f" * 5000],
        "more than the 512",
        None,
    ),
    "method named like a built-in's paper profile": (
        [*RUN, "{ws}/bad.py:TentPaper"],
        "is named like method 'tent' with profile=paper",
        None,
    ),
    "name ..": (["run", "--method", "tent", "--name", ".."], "starts with '.': a hidden file", None),
    "name .x": (["run", "--method", "tent", "--name", ".x"], "starts with '.': a hidden file", None),
    # models
    "factory exits": ([*BYO, "--model", "{ws}/factories.py:exits"], "the factory raised SystemExit: 1", _byo),
    "model sys:exit": ([*BYO, "--model", "sys:exit"], "the factory raised SystemExit", _byo),
    "factory on the meta device": ([*BYO, "--model", "{ws}/factories.py:on_meta"], "returned a model on the meta device", _byo),
    "model states input_size 100000": (
        [*BYO, "--model", "{ws}/factories.py:huge_input"],
        "states input_size 100000, outside 8..8192",
        _byo,
    ),
    # (4)-(6) images and class maps
    "float image (mode F)": ([*BYO, *MODEL], "float.tif holds 32-bit floats (mode F)", lambda ws: _replace_image(ws, _float_tiff)),
    "image 1 x 60000 px": (
        [*BYO, *MODEL],
        "thin.png is 60000 x 1 px: resized to 224 px on its short side",
        lambda ws: _replace_image(ws, _thin_png),
    ),
    "header claims 9000 x 9000": (
        [*BYO, *MODEL],
        "big.png is 9000 x 9000 px, more than the 64,000,000 pixels",
        lambda ws: _replace_image(ws, lambda f: _png_claiming(f / "big.png", 9000, 9000)),
    ),
    "header claims 30000 x 30000": (
        [*BYO, *MODEL],
        "huge.png: DecompressionBombError",
        lambda ws: _replace_image(ws, lambda f: _png_claiming(f / "huge.png", 30_000, 30_000)),
    ),
    "image link loops": ([*BYO, *MODEL], "a.png is part of a symbolic-link loop", _loop),
    "image link dangles": ([*BYO, *MODEL], "gone.png is a dangling symbolic link", _dangling),
    "class map: two folders on one index": (
        [*BYO, *MODEL, "--class-map", "{ws}/map.csv"],
        "maps the class folders 'ant' and 'cat' onto one index, 1",
        _map("ant,1\ncat,1\ndog,2\nfox,3\n"),
    ),
    "domain folder name not UTF-8": ([*BYO, *MODEL], "is not valid UTF-8", _not_utf8_domain),
}


def _argv(args, ws: Path) -> list[str]:
    argv = [a.replace("{ws}", str(ws)) for a in args]
    if "--dataset" in argv or argv[0] != "run":  # the user's own images, or another command
        return argv
    return ["run", *tiny(ws), *argv[1:]]  # the case's own values come last, so they win over the tiny defaults


@pytest.mark.parametrize("case", list(CASES))
def test_refused_in_one_line_and_nothing_changes(case, ws):
    args, needle, setup = CASES[case]
    if setup is not None:
        setup(ws)
    before = snapshot(ws)
    assert_refused(invoke(cli, _argv(args, ws)), PROG, needle.replace("{ws}", str(ws)), before, ws)


def test_live_refuses_a_prediction_that_cannot_be_scored_and_writes_nothing(ws):
    """Checked when the held logits are scored (outside the episode's clock), the live run ends
    with the same one line and writes nothing."""
    before = snapshot(ws)
    live = ["live", "--method", str(ws / "bad.py") + ":{}", *tiny(ws, "--rho", "1", "--lambda-ms", "10", "--warmup-batches", "0")]
    for cls, needle in (
        ("Short", "returned a prediction at episode fog step 0 that cannot be scored: shape (1, 10)"),
        ("LateNaN", "that cannot be scored: values that are NaN or infinite"),
    ):
        line = assert_refused(invoke(cli, [live[0], live[1], live[2].format(cls), *live[3:]]), PROG, needle, before, ws)
        assert "nothing written: a live run is written whole" in line


# ------------------------------------------------------------------------ what must work
def test_the_prediction_check_runs_between_events_never_inside_one(ws, monkeypatch):
    """Every check follows exactly one complete event (its three clock readings: pickup,
    prediction, pipeline free), so it adds nothing to a measured e or l."""
    from tempora_trace import timing
    from tempora_trace.runner import MethodRun

    log: list[str] = []
    real_now, real_check = timing.now_ns, MethodRun.check_prediction
    monkeypatch.setattr(timing, "now_ns", lambda: (log.append("t"), real_now())[1])
    monkeypatch.setattr(MethodRun, "check_prediction", lambda self, *a, **k: (log.append("check"), real_check(self, *a, **k))[1])
    res = invoke(cli, ["run", "--method", "tent", *tiny(ws, "--timing-sample", "0")])
    assert res.exit_code == 0, res.stderr
    segments = "".join("c" if e == "check" else "t" for e in log).split("c")[:-1]
    assert len(segments) > 5 and all(seg == "ttt" for seg in segments), segments


def test_a_method_file_parsing_arguments_at_import_sees_only_its_own_path(ws):
    res = invoke(cli, ["run", "--method", f"{ws}/argv_method.py:Plain", *tiny(ws)])
    assert res.exit_code == 0, res.stderr
    assert (ws / "out" / "argv-plain-bs8.parquet").is_file()
    assert not list(ws.rglob("__pycache__")), "bytecode written beside the user's files"


def test_a_policy_takes_a_method_given_by_file(ws):
    res = invoke(cli, ["run", "--method", f"{ws}/bad.py:Adapter", "--policy", "every:2", *tiny(ws)])
    assert res.exit_code == 0, res.stderr
    meta = json.loads(pq.read_schema(next((ws / "out").glob("adapter*.parquet"))).metadata[METADATA_KEY.encode()])
    assert meta["policy"] == "every:2" and meta["method_source"]["kind"] == "file"


FLAKY_WITH_HELPER = """
import os

import torch

from tempora_trace.methods import TTAMethod

import {helper} as helper


class Scaled(TTAMethod):
    # stops in its second episode while BYO_BOOM is set (an interrupted run)

    name = "scaled"
    family = "baseline"
    resets = 0

    def predict(self, x):
        with torch.no_grad():
            return self.model(x) * helper.SCALE

    def adapt(self):
        if os.environ.get("BYO_BOOM") and type(self).resets >= 2:
            raise ValueError("stopped")

    def reset(self):
        super().reset()
        type(self).resets += 1
"""


def test_two_policies_naming_one_trace_are_traced_once(ws):
    res = invoke(cli, ["run", "--method", "tent", *tiny(ws, "--policy", "fraction:0.5,fraction:0.5:2025")])
    assert res.exit_code == 0, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and "names the same trace as" in lines[0] and "it is traced once" in lines[0], res.stderr
    assert len(list((ws / "out").glob("*.parquet"))) == 1


@pytest.fixture
def broken_plugin(tmp_path, monkeypatch):
    """An installed distribution whose method's module raises when imported."""
    from tempora_trace import methods as registry

    site, module = tmp_path / "site", f"byo_boom_{uuid.uuid4().hex[:8]}"
    info = site / "byo_boom-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: byo-boom\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[tempora.methods]\nexploding = {module}:X\n", encoding="utf-8")
    (site / f"{module}.py").write_text("raise RuntimeError('plugin exploded at import')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    registry.refresh_entry_points()
    yield module
    monkeypatch.undo()
    registry.refresh_entry_points()


def test_a_broken_plugin_elsewhere_breaks_no_policy_run_and_no_listing(ws, broken_plugin):
    assert_refused(
        invoke(cli, ["run", "--method", "lame", "--policy", "every:2", *tiny(ws)]),
        PROG,
        "has no adapt step (its work is inside the prediction), so a policy has nothing to skip; built-in methods that adapt:",
    )
    res = invoke(cli, ["run", "--method", "tent", "--policy", "every:2", *tiny(ws)])
    assert res.exit_code == 0, res.stderr
    write_model_file(ws / "model.py")
    res = invoke(cli, ["list", "--model", f"{ws}/model.py:build", "--input-size", "32"])
    assert res.exit_code == 0, res.stderr
    assert "methods: " in res.output and "tent" in res.output
    assert f"not listed: cannot import method module '{broken_plugin}'" in res.output and "plugin exploded at import" in res.output


def test_resume_refuses_a_changed_helper_the_method_file_imports(ws, monkeypatch):
    """The method's identity covers the Python files of its folder that it imported: a helper
    edited between an interruption and --resume is refused like an edited method file."""
    helper = f"byo_helper_{uuid.uuid4().hex[:8]}"
    (ws / "methods").mkdir()
    (ws / "methods" / f"{helper}.py").write_text("SCALE = 1.0\n")
    (ws / "methods" / "scaled.py").write_text(FLAKY_WITH_HELPER.replace("{helper}", helper))
    monkeypatch.syspath_prepend(str(ws / "methods"))
    args = ["run", "--method", f"{ws}/methods/scaled.py:Scaled", *tiny(ws, "--domains", "gaussian_noise,fog", "--warmup-batches", "0")]
    monkeypatch.setenv("BYO_BOOM", "1")
    first = invoke(cli, args)
    assert first.exit_code == 2 and "complete episodes are kept for --resume" in first.stderr, first.stderr
    monkeypatch.delenv("BYO_BOOM")
    (ws / "methods" / f"{helper}.py").write_text("SCALE = 1000.0\n")
    assert_refused(invoke(cli, [*args, "--resume"]), PROG, "options differ from the interrupted run (method_source)")
    (ws / "methods" / f"{helper}.py").write_text("SCALE = 1.0\n")  # the helper as the interrupted run had it: resumes
    res = invoke(cli, [*args, "--resume"])
    assert res.exit_code == 0, res.stderr
    meta = json.loads(pq.read_schema(ws / "out" / "scaled-bs8.parquet").metadata[METADATA_KEY.encode()])
    from tempora_trace.methods._registry import file_sha256

    assert meta["method_source"]["sha256"] != file_sha256(ws / "methods" / "scaled.py"), "the helper is not in the identity"
    assert not list(ws.rglob("__pycache__"))


def test_check_method_counts_sys_exit_as_a_failure_and_prints_its_summary(ws):
    res = invoke(cli, ["check-method", f"{ws}/bad.py:Exits", "--batches", "2", "--batch-size", "4"])
    assert res.exit_code == 1, res.output + res.stderr
    assert "FAIL reset: raised in predict: SystemExit: 0" in res.output
    assert re.search(r"exits: \d of \d+ checks passed", res.output), res.output


def test_check_method_records_a_given_param_and_refuses_a_bad_one_in_one_line(ws):
    from tempora_trace.methods.testing import check_method

    results = check_method("tent", {"lr": 0.001}, checks=("build", "options"), batches=2, batch_size=4)
    assert [(r.name, r.ok) for r in results] == [("build", True), ("options", True)], [r.line() for r in results]
    before = snapshot(ws)
    assert_refused(
        invoke(cli, ["check-method", "tent", "--param", "lr_typo=1"]),
        PROG,
        "--param lr_typo: method 'tent' has no option 'lr_typo'",
        before,
        ws,
    )
    assert_refused(invoke(cli, ["check-method", "tent", "--param", "lr=-1"]), PROG, "--param: ", before, ws)


def test_left_over_images_are_named_in_a_warning(ws):
    _byo(ws)
    from PIL import Image

    Image.new("RGB", (8, 8)).save(ws / "imgs" / "cat" / "extra.png")  # 17 images, batches of 4
    res = invoke(cli, _argv([*BYO, *MODEL], ws))
    assert res.exit_code == 0, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tempora-trace: warning: domain 'imgs' holds 17 images"), res.stderr
    assert "leaves out 1" in lines[0]


# ------------------------------------------------------------------------ folder identity and decoding
def _bmp_folder(root: Path, seed: int) -> Path:
    """Two classes of four 8 x 8 BMPs (a BMP's size depends on its side only)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True, exist_ok=True)
        for i in range(4):
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(root / cls / f"{i}.bmp")
    return root


def test_a_folders_identity_is_its_content(tmp_path):
    from tempora_trace.data import get_dataset

    one, two = _bmp_folder(tmp_path / "x" / "pics", 0), _bmp_folder(tmp_path / "y" / "pics", 1)
    assert sorted(p.stat().st_size for p in one.rglob("*.bmp")) == sorted(p.stat().st_size for p in two.rglob("*.bmp"))
    first = get_dataset(f"folder:{one}").name
    assert first.startswith("folder:pics@") and first != get_dataset(f"folder:{two}").name
    assert get_dataset(f"folder:{one}").name == first  # the same images: the same name
    for path in sorted(one.rglob("*.bmp")):  # every image overwritten by another of the same size
        path.write_bytes((two / path.relative_to(one)).read_bytes())
    assert get_dataset(f"folder:{one}").name == get_dataset(f"folder:{two}").name != first


def _decoded(tmp_path: Path, img, name: str = "x.png") -> "np.ndarray":
    from tempora_trace.data.folder import FolderSource
    from tempora_trace.preprocess import Preprocess

    img.save(tmp_path / name)
    source = FolderSource([tmp_path / name], np.zeros(1, dtype=np.int64), Preprocess(8, 8, "bilinear"))
    return source.get_batch([0])[0][0].numpy()


def test_sixteen_bit_images_are_scaled_not_clipped(tmp_path):
    from PIL import Image

    level = np.full((8, 8), 16384, dtype=np.uint16)  # a quarter of the 16-bit range
    x = _decoded(tmp_path, Image.fromarray(level))
    assert x.shape == (3, 8, 8) and np.allclose(x, round(16384 / 257) / 255, atol=1 / 255), x.mean()
    wide = Image.fromarray(level.astype(np.int32))  # mode I
    assert np.allclose(_decoded(tmp_path, wide, "i.tif"), x)


@pytest.mark.parametrize("mode", ["1", "L", "LA", "P", "RGBA", "CMYK", "I;16", "I"])
def test_every_mode_decodes_to_the_colours_it_shows(mode, tmp_path):
    """A mid-grey image in each mode decodes to mid-grey RGB (alpha and palettes resolved
    without a warning); 1-bit white to white."""
    from PIL import Image

    grey = Image.new("RGB", (8, 8), (128, 128, 128))
    img = {"1": Image.new("1", (8, 8), 1), "I;16": Image.fromarray(np.full((8, 8), 128 * 257, dtype=np.uint16))}.get(mode)
    if img is None:
        img = Image.fromarray(np.full((8, 8), 128 * 257, dtype=np.int32)) if mode == "I" else grey.convert(mode)
    if mode == "P":  # one palette entry, grey, and it is the transparent one: its colour is kept
        img = grey.convert("P", palette=Image.Palette.ADAPTIVE, colors=2)
        img.info["transparency"] = 0
    want = 1.0 if mode == "1" else 128 / 255
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from tempora_trace.data.folder import to_rgb

        out = np.asarray(to_rgb(img, Path(f"x.{mode}")), dtype=np.float64) / 255
    assert out.shape == (8, 8, 3) and np.allclose(out, want, atol=2 / 255), (mode, out.mean())


def test_a_class_map_saved_with_a_byte_order_mark_maps_its_first_folder(tmp_path):
    from tempora_trace.data.folder import read_class_map

    path = tmp_path / "map.csv"
    path.write_text("folder,index\nant,3\ncat,5\n", encoding="utf-8-sig")
    assert path.read_bytes()[:3] == b"\xef\xbb\xbf"
    assert read_class_map(path, ("ant", "cat")) == {"ant": 3, "cat": 5}


# ------------------------------------------------------------------------ names from the data
def _named_traces(folder: Path, method: str, episodes=("fog", "snow"), **kwargs) -> Path:
    small = dict(num_batches=6, checkpoints=(0, 2), frozen_eval=2, batch_size=8, num_classes=10, episodes=episodes, **kwargs)
    write_trace_set(folder, ("standard", "tent"), **small)
    write_trace(folder / "hostile.parquet", method, profile=PROFILES["tent"], **small)
    return folder


HTML_DOMAIN = "<svg onload=alert(1)>"
HTML_MODEL = "<img src=x onerror=alert(2)>.py:build"
LINK_METHOD = "[x](javascript:alert(3))$\\frac{$"


def test_report_md_shows_names_from_the_data_and_runs_none(tmp_path):
    from tempora_sim.commands.main import main as sim

    traces = _named_traces(tmp_path / "traces", LINK_METHOD, episodes=("fog", HTML_DOMAIN), model=HTML_MODEL)
    res = invoke(sim, ["report", traces, "--out", tmp_path / "report", "--no-explore"])
    assert res.exit_code == 0, res.stderr
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert "<svg" not in md and "<img" not in md, "raw HTML from the data"
    assert "&lt;svg onload=alert(1)&gt;" in md and "&lt;img src=x onerror=alert(2)&gt;.py:build" in md
    assert "\\[x\\](javascript:alert(3))$\\\\frac{$" in md and not re.search(r"(?<!\\)\]\(javascript", md)
    assert pl.read_csv(tmp_path / "report" / "tables" / "offline.csv").columns  # CSVs keep the names as they are


def test_terminal_tables_show_escapes_and_markup_in_names_as_text(tmp_path):
    from tempora_sim.commands.main import main as sim

    traces = _named_traces(tmp_path / "traces", "\x1b[2J[bold red]x[/]", model="\x1b]0;title\x07m")
    res = invoke(sim, ["sweep", traces, "--protocol", "offline,discrete"], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.stderr
    assert "\x1b" not in res.output and "\x07" not in res.output
    assert "\\x1b[2J[bold red]x[/]" in res.output and "\\x1b]0;title\\x07m" in res.output


def test_a_name_holding_a_page_placeholder_stays_a_name():
    from tempora_sim.commands.explore import render_page

    data = {"tool": "tempora-sim __DATA__", "groups": [{"title": "__DATA__ __TITLE__ /*__APP__*/"}]}
    page = render_page(data).decode("utf-8")
    packed = re.search(r'<script id="tempora-data" type="application/octet-stream">([^<]*)</script>', page).group(1)
    assert json.loads(gzip.decompress(base64.b64decode(packed))) == data
    assert "<title>Tempora explorer: __DATA__ __TITLE__ /*__APP__*/</title>" in page


def test_the_pages_tooltips_format_only_numbers():
    """A bar chart's tooltip is handed undefined for a missing bar: formatting it must not throw."""
    app = (Path(__file__).resolve().parents[3] / "src" / "tempora_sim" / "exploration" / "assets" / "app.js").read_text(encoding="utf-8")
    formatters = re.findall(r"valueFormatter: \(x\) => \(([^?]*)\?", app)
    assert formatters and all('typeof x === "number"' in f for f in formatters), formatters


def test_a_label_beyond_the_bound_is_refused_by_the_readers(tmp_path):
    from tempora_sim.commands.main import main as sim

    write_trace(
        tmp_path / "t" / "tent.parquet", "tent", num_batches=4, episodes=("fog",), batch_size=8, num_classes=10, model="m" * 100_000
    )
    before = snapshot(tmp_path)
    assert_refused(invoke(sim, ["sweep", tmp_path / "t"]), "tempora-sim", "metadata 'model' is 100,000 characters long", before, tmp_path)


def _labelled_traces(folder: Path, chars: int) -> Path:
    """A group whose every name (dataset, model, device, method, two domains) has ``chars``
    characters, with measured timing variability (so the page replays timing replicates too)."""
    from tempora_sim.sweeps.synthetic import SyntheticVariability

    def name(tag: str) -> str:
        return (tag + "x" * chars)[:chars]

    kw = dict(num_batches=12, checkpoints=(0, 4), frozen_eval=4, batch_size=8, num_classes=10, variability=SyntheticVariability())
    kw |= dict(episodes=(name("fog__"), name("snow_")), model=name("model"), dataset=name("datas"), device=name("devic"))
    write_trace_set(folder, ("standard", "tent"), **kw)
    write_trace(folder / "long.parquet", name("meth_"), profile=PROFILES["eta"], rng_seed=7, **kw)
    return folder


def test_the_pages_memory_does_not_grow_with_the_length_of_names(tmp_path, monkeypatch):
    """Names of 512 characters (the bound) cost the page what names of 5 do: the rows its views
    pool, resample and match (the frames handed to the intervals, with their timing replicates,
    and the intervals' index) and the Python objects built on the way (traced peak, after a first
    build has loaded the kernels). Before the views carried short codes, 512-character names took
    19 times the frames' memory and 1.6 times the traced peak of 5-character ones."""
    import tracemalloc

    from tempora_sim import analyses as an
    from tempora_sim.exploration.page import build_page_data
    from tempora_sim.sweeps.options import SweepOptions
    from tempora_sim.uncertainty.bootstrap import BootstrapOptions

    intervals = an.utility_intervals
    frames: list[int] = []

    def measured(df, rows=None, opts=None, pooled=True, timing=None):
        out = intervals(df, rows, opts, pooled, timing)
        held = [df, out.index] + ([rows] if rows is not None else []) + ([timing.base, *timing.reps] if timing is not None else [])
        frames.append(sum(f.estimated_size() for f in held))
        return out

    monkeypatch.setattr(an, "utility_intervals", measured)
    options = SweepOptions.build(None, protocols="discrete,discrete-continuous")
    boot = BootstrapOptions(resamples=200, timing_replicates=5)

    def build(chars: int, run: str) -> tuple[int, int, dict]:
        folder = _labelled_traces(tmp_path / run, chars)
        frames.clear()
        tracemalloc.start()
        try:
            data = build_page_data([folder], options, ("periodic",), boot, progress=False)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return sum(frames), peak, data

    build(5, "warm-up")
    short_frames, short_peak, short = build(5, "short")
    long_frames, long_peak, long = build(512, "long")
    assert short_frames > 0 and long_frames <= 1.25 * short_frames, (long_frames, short_frames)
    assert long_peak <= 1.25 * short_peak, (long_peak, short_peak)
    # the page shows the names whole, and the same utilities for the same batches under other names
    (g_short,), (g_long,) = short["groups"], long["groups"]
    assert sorted(map(len, g_long["methods"])) == [4, 8, 512] and sorted(map(len, g_long["episodes"])) == [7, 512, 512]
    assert [len(m) for m in g_short["methods"]] == [len(m) if len(m) != 512 else 5 for m in g_long["methods"]]
    assert {k: v["u"] for k, v in g_long["views"].items()} == {k: v["u"] for k, v in g_short["views"].items()}


def test_a_method_that_adapted_on_no_batch_is_not_called_harmed():
    from tempora_sim.reporting.sentences import below_frozen_sentence

    frame = pl.DataFrame({"method": ["eta", "tent"], "beta": [0.0, 0.25]})
    text = below_frozen_sentence(frame)
    assert "tent ends below standard inference: the budget runs out after 25.0% of the stream" in text
    assert "eta adapts on no batch within the budget" in text and "harmful" not in text.split("eta")[1]


#: Cases this module adds to the hostile-input suite (docs/reference/errors.md counts them): the
#: table, live's two predictions (trace), the long label a reader refuses and the page's memory
#: with labels at the bound (simulator).
TRACE_CASE_COUNT = len(CASES) + 2 + 2  # + check-method's two refused params
SIM_CASE_COUNT = 2
