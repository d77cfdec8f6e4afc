"""`tempora-trace synthesize`: a synthetic ImageNet-C folder the real loader reads, written once,
reused when complete, rewritten when interrupted or drawn otherwise, and never written over a
folder it did not write; and the live runner's idle-time housekeeping (wait_until's ``idle``)."""

from __future__ import annotations

import json

import pytest

from tempora_trace.cli import main
from tempora_trace.data.imagenet import open_imagenet_c
from tempora_trace.data.synthetic import CLASSES, MARKER, write_imagenet_c_folder
from tempora_trace.errors import DataError
from tempora_trace.timing import IDLE_WORK_NS, now_ns, wait_until


def _images(root, domain="fog", severity=5):
    return sorted((root / domain / str(severity)).rglob("*.JPEG"))


def test_the_imagenet_c_loader_reads_it_with_labels_round_robin(tmp_path):
    assert write_imagenet_c_folder(tmp_path, ["fog", "contrast"], 12, size=32, workers=1) == ["fog", "contrast"]
    for domain in ("fog", "contrast"):
        folder = tmp_path / domain / "5"
        assert sum(1 for p in folder.iterdir() if p.is_dir()) == CLASSES
        assert json.loads((folder / MARKER).read_text())["complete"] is True
        source = open_imagenet_c(tmp_path, domain, 5)
        assert len(source) == 12
        x, y = source.get_batch(list(range(12)))
        assert tuple(x.shape) == (12, 3, 224, 224)  # the ImageNet transform, whatever the file size
        assert sorted(y.tolist()) == list(range(12))  # image i sits in class folder i mod 1000


def test_content_depends_on_neither_the_workers_nor_the_other_domains(tmp_path):
    write_imagenet_c_folder(tmp_path / "one", ["fog"], 300, size=16, workers=1)
    write_imagenet_c_folder(tmp_path / "two", ["contrast", "fog"], 300, size=16, workers=2)
    one, two = _images(tmp_path / "one"), _images(tmp_path / "two")
    assert [p.name for p in one] == [p.name for p in two] and len(one) == 300
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(one, two))


def test_a_complete_folder_is_reused_and_other_parameters_rewrite_it(tmp_path):
    write_imagenet_c_folder(tmp_path, ["fog"], 5, size=16, workers=1)
    first = _images(tmp_path)[0]
    stamp = first.stat().st_mtime_ns
    assert write_imagenet_c_folder(tmp_path, ["fog"], 5, size=16, workers=1) == []
    assert first.stat().st_mtime_ns == stamp
    assert write_imagenet_c_folder(tmp_path, ["fog"], 3, size=16, workers=1) == ["fog"]
    assert len(_images(tmp_path)) == 3  # the old images went with the old parameters


def test_an_interrupted_folder_is_written_again(tmp_path):
    write_imagenet_c_folder(tmp_path, ["fog"], 4, size=16, workers=1)
    marker = tmp_path / "fog" / "5" / MARKER
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "complete": False}))
    _images(tmp_path)[0].unlink()
    assert write_imagenet_c_folder(tmp_path, ["fog"], 4, size=16, workers=1) == ["fog"]
    assert len(_images(tmp_path)) == 4


def test_a_folder_it_did_not_write_is_never_touched(tmp_path):
    real = tmp_path / "fog" / "5" / "n01440764"
    real.mkdir(parents=True)
    (real / "photo.JPEG").write_bytes(b"real data")
    with pytest.raises(DataError, match="not written by"):
        write_imagenet_c_folder(tmp_path, ["fog"], 4, size=16, workers=1)
    assert (real / "photo.JPEG").read_bytes() == b"real data"
    assert not (tmp_path / "fog" / "5" / MARKER).exists()


def test_cli_writes_then_reuses_and_bad_input_is_one_line(tmp_path, capsys):
    args = ["synthesize", str(tmp_path), "--domains", "fog", "--images", "3", "--size", "16", "--workers", "1", "--quiet"]
    assert main(args) == 0
    assert "wrote fog" in capsys.readouterr().out
    assert main(args) == 0
    assert "reused fog" in capsys.readouterr().out
    for bad in (["--domains", "nope"], ["--images", "0"], ["--severity", "6"]):
        assert main(["synthesize", str(tmp_path / "x"), *bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("tempora-trace: error:") and err.count("\n") == 1


def test_idle_work_fills_a_long_wait_and_never_delays_a_short_one():
    calls = []
    target = now_ns() + 2 * IDLE_WORK_NS
    assert wait_until(target, idle=lambda: calls.append(now_ns())) >= target
    assert len(calls) == 1 and calls[0] < target
    target = now_ns() + IDLE_WORK_NS // 10
    assert wait_until(target, idle=lambda: calls.append(now_ns())) >= target
    assert len(calls) == 1  # too little time left: the housekeeping waits for a longer gap


def test_a_write_that_fails_midway_is_one_error_and_left_incomplete(tmp_path, monkeypatch):
    from tempora_trace.data import synthetic

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(synthetic, "_draw_chunk", full_disk)
    with pytest.raises(DataError, match="No space left on device"):
        write_imagenet_c_folder(tmp_path, ["fog"], 4, size=16, workers=1)
    assert json.loads((tmp_path / "fog" / "5" / MARKER).read_text())["complete"] is False
