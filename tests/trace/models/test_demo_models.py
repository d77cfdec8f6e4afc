"""The demo models: architecture contract (normalisation inside, norm kind, Linear head),
the committed weights (load strictly, >= 90 % clean, clearly worse under severity-5 noise),
and that training is deterministic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from tempora_trace.data import demo as D
from tempora_trace.models.demo import build_demo_resnet
from tempora_trace.models.train_demo import WEIGHT_FILES, evaluate, to_tensor, train_one

WEIGHTS = Path(__file__).resolve().parents[3] / "src" / "tempora_trace" / "models" / "weights"
N_EVAL = 1000


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def eval_data(tmp_path_factory):
    """A 1,000-image demo test split and its gaussian_noise severity-5 slice."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TEMPORA_DEMO_TEST_SIZE", str(N_EVAL))
    home = tmp_path_factory.mktemp("demo-home")
    clean, labels = D.ensure_demo_clean(home, "test")
    directory = D.ensure_demo_corrupted("gaussian_noise", 5, home)
    noisy = np.load(directory / "gaussian_noise.npy")[4 * N_EVAL : 5 * N_EVAL]
    mp.undo()
    return clean, labels, noisy


@pytest.mark.parametrize("norm, norm_type", [("bn", nn.BatchNorm2d), ("gn", nn.GroupNorm)])
def test_architecture_contract(norm, norm_type):
    model = build_demo_resnet(norm=norm, num_classes=10)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    norms = [m for m in model.modules() if isinstance(m, norm_type)]
    assert len(norms) == len(convs) > 0
    other = nn.GroupNorm if norm == "bn" else nn.BatchNorm2d
    assert not any(isinstance(m, other) for m in model.modules())
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 1 and linears[0] is list(model.modules())[-1]
    assert linears[0].out_features == 10
    model.eval()
    x = torch.rand(3, 3, 32, 32)
    assert model(x).shape == (3, 10)
    # normalisation is inside the model: the head's input is the pooled feature vector
    feats = model.features(x)
    assert torch.allclose(model.fc(feats), model(x))
    with pytest.raises(ValueError, match="unknown norm"):
        build_demo_resnet(norm="ln")


@pytest.mark.parametrize("norm", ["bn", "gn"])
def test_committed_weights_are_small_and_accurate(norm, eval_data):
    clean, labels, noisy = eval_data
    path = WEIGHTS / WEIGHT_FILES[norm]
    assert path.stat().st_size <= 2_000_000
    model = build_demo_resnet(norm=norm, num_classes=10)
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True), strict=True)
    clean_acc = evaluate(model, clean, labels)
    noisy_acc = evaluate(model, noisy, labels)
    assert clean_acc >= 0.90, f"{norm}: clean accuracy {clean_acc:.3f}"
    assert noisy_acc <= clean_acc - 0.15, f"{norm}: gaussian_noise@5 {noisy_acc:.3f} vs clean {clean_acc:.3f}"


def test_test_time_batchnorm_recovers_accuracy_under_noise(eval_data):
    """The CIFAR-10-C regime the TTA methods rely on: the shift moves BN statistics, so
    normalising with test-batch statistics (the core of Tent/BN adaptation) beats the frozen
    source model on severity-5 noise."""
    clean, labels, noisy = eval_data
    model = build_demo_resnet(norm="bn", num_classes=10)
    model.load_state_dict(torch.load(WEIGHTS / WEIGHT_FILES["bn"], map_location="cpu", weights_only=True))
    source_acc = evaluate(model, noisy, labels)
    model.train()  # BN uses the statistics of each test batch
    correct = 0
    with torch.no_grad():
        for start in range(0, len(noisy), 64):
            logits = model(to_tensor(noisy[start : start + 64]))
            correct += int((logits.argmax(1) == torch.from_numpy(labels[start : start + 64])).sum())
    adapted_acc = correct / len(noisy)
    assert adapted_acc >= source_acc + 0.05, f"source {source_acc:.3f}, test-time BN {adapted_acc:.3f}"


def test_training_is_deterministic():
    images, labels = D.generate_clean("train", 256, workers=1)
    states = []
    for _ in range(2):
        model, info = train_one("bn", images, labels, epochs=1, batch_size=64, lr=0.1, weight_decay=5e-4, pad=3, log=lambda *_: None)
        assert info["steps"] == 4
        states.append(model.state_dict())
    for key in states[0]:
        assert torch.equal(states[0][key], states[1][key]), key
