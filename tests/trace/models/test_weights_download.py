"""Pretrained weights: found where their library keeps them, downloaded the library's way when
missing (here from a local file served through a ``file://`` URL, or a stand-in for the Hub
client), refused with a one-line explanation when downloads are off; the cache folders and
the demo-data lock come from platformdirs and filelock."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest
import torch

from tempora_trace.cli import main
from tempora_trace.errors import WeightsError
from tempora_trace.models import get_model, pretrained
from tempora_trace.paths import tempora_home


@pytest.fixture
def online(monkeypatch, tmp_path):
    """Downloads allowed (the suite runs offline), torch hub folder private to the test."""
    monkeypatch.delenv("TEMPORA_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))
    return tmp_path


def served_resnet18(folder, corrupt: bool = False):
    """A resnet18 state_dict saved under torch hub's naming (``<arch>-<sha256 prefix>.pth``)."""
    from torchvision.models import resnet18

    torch.manual_seed(0)
    state = resnet18(num_classes=1000).state_dict()
    folder.mkdir(parents=True, exist_ok=True)
    raw = folder / "raw.pth"
    torch.save(state, raw)
    digest = hashlib.sha256(raw.read_bytes()).hexdigest()[:8]
    served = folder / f"resnet18-{'00000000' if corrupt else digest}.pth"
    raw.rename(served)
    return served, state


def test_missing_torchvision_weights_are_downloaded_with_progress(online, monkeypatch, capsys):
    served, state = served_resnet18(online / "server")
    monkeypatch.setattr(pretrained, "torchvision_url", lambda arch: served.as_uri())
    net, spec = get_model("resnet18")
    kept = online / "torch-home" / "hub" / "checkpoints" / served.name
    assert kept.is_file() and spec.name == "resnet18"
    assert all(torch.equal(net.net.state_dict()[k], v) for k, v in state.items())
    err = capsys.readouterr().err
    assert f"downloading the weights of 'resnet18' from {served.as_uri()}" in err
    assert "%" in err  # torch hub's progress bar

    # found in torch hub's folder from now on: no second download
    monkeypatch.setattr(torch.hub, "download_url_to_file", lambda *a, **k: pytest.fail("downloaded twice"))
    get_model("resnet18")


def test_a_download_that_fails_its_hash_check_is_refused(online, monkeypatch):
    served, _ = served_resnet18(online / "server", corrupt=True)
    monkeypatch.setattr(pretrained, "torchvision_url", lambda arch: served.as_uri())
    with pytest.raises(WeightsError, match=r"could not download the weights of 'resnet18' .*--weights FILE"):
        get_model("resnet18")


@pytest.mark.parametrize("how", ["argument", "TEMPORA_OFFLINE", "HF_HUB_OFFLINE"])
def test_offline_refuses_and_explains_without_downloading(online, monkeypatch, how):
    monkeypatch.setattr(torch.hub, "download_url_to_file", lambda *a, **k: pytest.fail("downloaded while offline"))
    if how != "argument":
        monkeypatch.setenv(how, "1")
    folder = online / "torch-home" / "hub" / "checkpoints"
    with pytest.raises(WeightsError) as caught:
        get_model("resnet18", offline=True if how == "argument" else None)
    message = str(caught.value)
    assert "downloads are off" in message and "resnet18-f37072fd.pth" in message and str(folder) in message
    assert "https://download.pytorch.org/models/resnet18-f37072fd.pth" in message


def test_cli_offline_flag_is_one_line_exit_2(online, monkeypatch, capsys):
    monkeypatch.setattr(torch.hub, "download_url_to_file", lambda *a, **k: pytest.fail("downloaded while offline"))
    code = main(
        [
            "run",
            "--method",
            "standard",
            "--dataset",
            "imagenet-c",
            "--model",
            "resnet18",
            "--data-root",
            str(online),
            "--offline",
            "--out",
            str(online / "out"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("tempora-trace: error: no weights for 'resnet18' and downloads are off")


def test_preprocessing_comes_from_the_weights_publisher():
    net, _ = get_model("resnet18", weights="random")
    preprocess = pretrained.torchvision_weights("resnet18").transforms()
    assert net.mean.flatten().tolist() == pytest.approx(preprocess.mean)
    assert net.std.flatten().tolist() == pytest.approx(preprocess.std)
    cfg = pretrained.timm_pretrained_cfg("vit_base_patch16_224.augreg2_in21k_ft_in1k")
    assert cfg.hf_hub_id == "timm/vit_base_patch16_224.augreg2_in21k_ft_in1k" and cfg.mean == (0.5, 0.5, 0.5)


# ------------------------------------------------------------------------ Hugging Face
REPO = "timm/vit_base_patch16_224.augreg2_in21k_ft_in1k"


@pytest.fixture
def hf_cache(monkeypatch, tmp_path):
    from huggingface_hub import constants

    cache = tmp_path / "hf-hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def test_hf_weights_found_in_the_cache_without_network(hf_cache, online, monkeypatch):
    import huggingface_hub

    repo_dir = hf_cache / ("models--" + REPO.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "model.safetensors").write_bytes(b"weights")
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda *a, **k: pytest.fail("downloaded a cached file"))
    assert pretrained.fetch_hf(REPO, "model.safetensors", "vit_base_patch16_224") == snapshot / "model.safetensors"


def test_hf_weights_downloaded_when_missing_and_refused_offline(hf_cache, online, monkeypatch, capsys):
    import huggingface_hub

    calls = []

    def fake_download(repo_id, filename, **kwargs):
        calls.append((repo_id, filename))
        path = hf_cache / "downloaded" / filename
        path.parent.mkdir(parents=True)
        path.write_bytes(b"weights")
        return str(path)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    with pytest.raises(WeightsError, match=r"downloads are off: put model\.safetensors of the Hugging Face repo " + REPO):
        pretrained.fetch_hf(REPO, "model.safetensors", "vit_base_patch16_224", offline=True)
    assert calls == []
    path = pretrained.fetch_hf(REPO, "model.safetensors", "vit_base_patch16_224")
    assert calls == [(REPO, "model.safetensors")] and path.read_bytes() == b"weights"
    assert f"downloading the weights of 'vit_base_patch16_224' from the Hugging Face repo {REPO}" in capsys.readouterr().err


def test_hf_download_failure_is_one_explained_error(hf_cache, online, monkeypatch):
    import huggingface_hub

    def unreachable(*args, **kwargs):
        raise OSError("could not reach the Hub\nsecond line")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", unreachable)
    with pytest.raises(WeightsError) as caught:
        pretrained.fetch_hf(REPO, "model.safetensors", "vit_base_patch16_224")
    assert "\n" not in str(caught.value) and "OSError: could not reach the Hub" in str(caught.value)


# ------------------------------------------------------------------------ cache folder, lock
def test_cache_root_is_tempora_home_else_the_platform_user_cache(monkeypatch, tmp_path):
    import platformdirs

    monkeypatch.setenv("TEMPORA_HOME", str(tmp_path / "th"))
    assert tempora_home() == tmp_path / "th"
    monkeypatch.delenv("TEMPORA_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tempora_home() == platformdirs.user_cache_path("tempora", appauthor=False)
    if sys.platform.startswith("linux"):
        assert tempora_home() == tmp_path / "xdg" / "tempora"


def test_demo_lock_excludes_other_processes(tmp_path):
    from tempora_trace.data.demo import _locked

    lock = tmp_path / "cache" / "x.lock"
    probe = "import sys, filelock; filelock.FileLock(sys.argv[1]).acquire(timeout=0.2)"
    with _locked(lock):
        held = subprocess.run([sys.executable, "-c", probe, str(lock)], capture_output=True, text=True)
        assert held.returncode != 0 and "Timeout" in held.stderr
    free = subprocess.run([sys.executable, "-c", probe, str(lock)], capture_output=True, text=True)
    assert free.returncode == 0, free.stderr
