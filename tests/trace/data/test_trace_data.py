"""Data streams: CIFAR-C slicing, ImageNet folder layouts and label maps, domain groups,
batch order, and the model registry's weight handling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.cifar import write_cifar_c
from tempora_trace.data import get_dataset
from tempora_trace.data.cifar import open_cifar_c
from tempora_trace.data.imagenet import IMAGENET_R_CLASSES, open_imagenet_c, open_imagenet_variant
from tempora_trace.data.streams import CORRUPTIONS, batch_order, expand_domains
from tempora_trace.errors import ConfigError, DataError, WeightsError
from tempora_trace.models import get_model


def test_cifar_c_severity_slices_and_label_layouts(tmp_path):
    root = write_cifar_c(tmp_path, ["fog"], per_severity=4)
    data = np.load(root / "fog.npy")
    labels = np.load(root / "labels.npy")
    src = open_cifar_c(root, "fog", 3)
    x, y = src.get_batch([0, 3])
    assert len(src) == 4 and x.shape == (2, 3, 32, 32) and x.dtype == torch.float32
    torch.testing.assert_close(x[1], torch.from_numpy(data[8 + 3]).permute(2, 0, 1).float() / 255)
    assert y.tolist() == [labels[8], labels[11]]
    np.save(root / "labels.npy", labels[:4])  # the M-label variant reads the same
    assert open_cifar_c(root, "fog", 3).get_batch([0, 3])[1].tolist() == y.tolist()
    np.save(root / "labels.npy", labels[:3])
    with pytest.raises(DataError, match="labels"):
        open_cifar_c(root, "fog", 3)
    with pytest.raises(DataError, match="snow.npy"):
        open_cifar_c(root, "snow", 5)


def _jpeg(path: Path, value: int) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((240, 240, 3), value, dtype=np.uint8)).save(path)


def test_imagenet_c_layout_and_transform(tmp_path):
    from PIL import Image

    root = tmp_path / "ImageNet-C"
    for k in range(1000):
        (root / "fog" / "5" / f"n{k:08d}").mkdir(parents=True)
    Image.fromarray(np.zeros((224, 224, 3), np.uint8)).save(root / "fog" / "5" / "n00000007" / "a.JPEG")
    src = open_imagenet_c(root, "fog", 5)
    x, y = src.get_batch([0])
    assert x.shape == (1, 3, 224, 224) and y.tolist() == [7]
    with pytest.raises(DataError, match="missing ImageNet-C folder"):
        open_imagenet_c(root, "fog", 4)


def test_imagenet_v2_maps_folder_names_to_class_indices(tmp_path):
    for cls in (0, 1, 2, 10, 100):
        _jpeg(tmp_path / str(cls) / "a.jpeg", cls)
    src, mask = open_imagenet_variant(tmp_path, "imagenet-v2")
    labels = sorted(src.get_batch([i])[1].item() for i in range(len(src)))
    assert mask is None and labels == [0, 1, 2, 10, 100]
    x, _ = src.get_batch([0])
    assert x.shape == (1, 3, 224, 224)  # resize 256 + centre crop 224


def test_imagenet_r_uses_its_200_class_mask(tmp_path, tiny_models):
    for i in range(200):
        (tmp_path / f"n{i:08d}").mkdir()
    _jpeg(tmp_path / "n00000005" / "a.jpg", 5)
    src, mask = open_imagenet_variant(tmp_path, "imagenet-r")
    assert mask == IMAGENET_R_CLASSES and len(mask) == 200 and mask == sorted(mask)
    assert src.get_batch([0])[1].tolist() == [5]
    spec = get_dataset("imagenet-r")
    assert spec.num_classes == 200 and spec.model_classes == 1000
    # scoring applies the mask: a logit vector peaking at ImageNet class mask[5] counts as label 5
    from tempora_trace.runner import TraceRun

    run = object.__new__(TraceRun)
    run.masks = {"imagenet-r": torch.as_tensor(mask)}
    logits = torch.zeros(2, 1000)
    logits[0, mask[5]] = 1.0
    logits[1, 999] = 5.0  # outside the subset: ignored
    logits[1, mask[5]] = 1.0
    assert run._correct(logits, torch.tensor([5, 5]), "imagenet-r") == 2


def test_domain_groups_and_order():
    assert expand_domains(["noise", "fog", "gaussian_noise"], CORRUPTIONS) == ["gaussian_noise", "shot_noise", "impulse_noise", "fog"]
    assert expand_domains(["blur,digital"], CORRUPTIONS)[0] == "defocus_blur"
    assert expand_domains(["all"], CORRUPTIONS) == CORRUPTIONS and len(CORRUPTIONS) == 15
    with pytest.raises(ConfigError):
        expand_domains(["rain"], CORRUPTIONS)


def test_batch_order_is_iid_drop_last_and_seeded():
    a = batch_order(100, 16, 2025, "fog")
    assert len(a) == 6 and all(len(b) == 16 for b in a)
    flat = np.concatenate(a)
    assert len(set(flat.tolist())) == 96 and not np.array_equal(flat, np.arange(96))
    assert all(np.array_equal(x, y) for x, y in zip(a, batch_order(100, 16, 2025, "fog")))
    assert not np.array_equal(a[0], batch_order(100, 16, 2025, "snow")[0])
    assert not np.array_equal(a[0], batch_order(100, 16, 7, "fog")[0])
    assert len(batch_order(100, 16, 2025, "fog", max_batches=2)) == 2


def test_model_weights_round_trip_and_missing_file_messages(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "th"))
    monkeypatch.setenv("TEMPORA_HOME", str(tmp_path / "tempora"))
    with pytest.raises(WeightsError, match=r"resnet18-f37072fd\.pth in .*th/hub/checkpoints"):
        get_model("resnet18")
    with pytest.raises(WeightsError, match=r"cifar10-resnet18\.pt"):
        get_model("cifar-resnet18")
    net, spec = get_model("cifar-resnet18", weights="random")
    assert spec.family == "cifar" and spec.norm == "bn" and spec.input_size == 32
    torch.save(net.net.state_dict(), tmp_path / "w.pt")
    (tmp_path / "tempora" / "weights").mkdir(parents=True)
    torch.save({"state_dict": net.net.state_dict()}, tmp_path / "tempora" / "weights" / "cifar10-resnet18.pt")
    loaded, _ = get_model("cifar-resnet18")  # found in $TEMPORA_HOME/weights, wrapped checkpoint
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded(x), net(x))
        # normalisation happens inside: the wrapper equals the bare net on normalised input
        mean = torch.tensor((0.4914, 0.4822, 0.4465)).view(1, 3, 1, 1)
        std = torch.tensor((0.2471, 0.2435, 0.2616)).view(1, 3, 1, 1)
        assert torch.allclose(loaded(x), loaded.net((x - mean) / std))
    with pytest.raises(WeightsError, match="does not fit"):
        get_model("cifar-resnet18", weights=tmp_path / "w.pt", num_classes=100)
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    with pytest.raises(WeightsError, match="cannot read"):
        get_model("cifar-resnet18", weights=tmp_path / "junk.pt")
