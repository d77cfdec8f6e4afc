"""The demo data set: CIFAR-10-C layout, lazy per-slice generation, determinism, and that
colour alone does not reveal the class (so models must learn shapes)."""

from __future__ import annotations

import hashlib
import threading

import numpy as np
import pytest

from tempora_trace.data import demo as D

N_TEST = 200


@pytest.fixture
def small(monkeypatch, tmp_path):
    """A reduced test split (N_TEST images) in a private cache root."""
    monkeypatch.setenv("TEMPORA_DEMO_TEST_SIZE", str(N_TEST))
    monkeypatch.delenv("TEMPORA_HOME", raising=False)
    return tmp_path


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def test_constants_match_imagecorruptions():
    from tempora_trace.data._corruptions_compat import CORRUPTIONS

    assert D.DEMO_CORRUPTIONS == CORRUPTIONS
    assert len(D.DEMO_CORRUPTIONS) == 15
    assert D.NUM_CLASSES == len(D.CLASS_NAMES) >= 10
    assert D.DEMO_TEST_SIZE >= 10_000


def test_cache_root_follows_tempora_home(monkeypatch, tmp_path):
    monkeypatch.delenv("TEMPORA_DEMO_TEST_SIZE", raising=False)
    monkeypatch.setenv("TEMPORA_HOME", str(tmp_path))
    assert D.demo_dir() == tmp_path / "demo" / D.DEMO_VERSION
    monkeypatch.delenv("TEMPORA_HOME")
    assert str(D.demo_dir()).endswith(f".cache/tempora/demo/{D.DEMO_VERSION}")
    assert D.demo_dir(tmp_path / "x") == tmp_path / "x" / "demo" / D.DEMO_VERSION


def test_clean_split_shapes_dtypes_balance(small):
    images, labels = D.ensure_demo_clean(small, "test")
    assert images.shape == (N_TEST, 32, 32, 3) and images.dtype == np.uint8
    assert labels.shape == (N_TEST,) and labels.dtype == np.int64
    assert np.array_equal(np.bincount(labels, minlength=D.NUM_CLASSES), np.full(D.NUM_CLASSES, N_TEST // D.NUM_CLASSES))
    # labels are shuffled, not cyclic
    assert not np.array_equal(labels[:20], np.arange(20) % D.NUM_CLASSES)
    # second call loads the cached files
    again = D.ensure_demo_clean(small, "test")
    assert np.array_equal(again[0], images) and np.array_equal(again[1], labels)
    assert (D.demo_dir(small) / "clean" / "test_images.npy").exists()
    assert D.demo_dir(small).name == f"{D.DEMO_VERSION}-n{N_TEST}"


def test_layout_is_cifar10c_and_generation_is_lazy(small):
    clean, labels = D.ensure_demo_clean(small, "test")
    directory = D.ensure_demo_corrupted("gaussian_noise", 3, small)
    assert directory == D.corrupted_dir(small)
    stored_labels = np.load(directory / "labels.npy")
    assert stored_labels.shape == (5 * N_TEST,) and stored_labels.dtype == np.int64
    assert np.array_equal(stored_labels, np.tile(labels, 5))
    data = np.load(directory / "gaussian_noise.npy")
    assert data.shape == (5 * N_TEST, 32, 32, 3) and data.dtype == np.uint8
    # severity s occupies rows (s-1)*N : s*N; only severity 3 was generated
    expected = D.corrupt_images(clean, "gaussian_noise", 3, workers=1)
    assert np.array_equal(data[2 * N_TEST : 3 * N_TEST], expected)
    assert not data[: 2 * N_TEST].any() and not data[3 * N_TEST :].any()
    assert D.completed_severities("gaussian_noise", small) == [3]
    assert sorted(p.name for p in directory.glob("*.npy")) == ["gaussian_noise.npy", "labels.npy"]

    D.ensure_demo_corrupted("gaussian_noise", 1, small)
    data = np.load(directory / "gaussian_noise.npy")
    assert np.array_equal(data[2 * N_TEST : 3 * N_TEST], expected)  # untouched
    assert np.array_equal(data[:N_TEST], D.corrupt_images(clean, "gaussian_noise", 1, workers=1))
    assert not data[N_TEST : 2 * N_TEST].any()
    assert D.completed_severities("gaussian_noise", small) == [1, 3]
    # severity 1 is a milder shift than severity 3 (same noise family, larger sigma)
    diff = lambda a: np.abs(a.astype(int) - clean.astype(int)).mean()  # noqa: E731
    assert 0 < diff(data[:N_TEST]) < diff(expected)


def test_generation_is_deterministic_and_independent_of_workers(monkeypatch, tmp_path):
    monkeypatch.setenv("TEMPORA_DEMO_TEST_SIZE", "60")
    digests = []
    for home, workers in ((tmp_path / "a", 1), (tmp_path / "b", 2)):
        images, labels = D.ensure_demo_clean(home, "test", workers=workers)
        directory = D.ensure_demo_corrupted("impulse_noise", 2, home, workers=workers)
        slice_ = np.load(directory / "impulse_noise.npy")[60:120]
        digests.append((_digest(images), _digest(labels), _digest(slice_)))
    assert digests[0] == digests[1]
    # image i does not depend on the split size: the reduced set is a prefix
    prefix, prefix_labels = D.generate_clean("test", 25, workers=1)
    assert np.array_equal(prefix, images[:25]) and np.array_equal(prefix_labels, labels[:25])
    # train and test splits are different draws
    train, _ = D.generate_clean("train", 25, workers=1)
    assert not np.array_equal(train, prefix)


def test_concurrent_requests_generate_once(small):
    D.ensure_demo_clean(small, "test")
    errors = []

    def ask():
        try:
            D.ensure_demo_corrupted("contrast", 2, small, workers=1)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    clean, _ = D.ensure_demo_clean(small, "test")
    data = np.load(D.corrupted_dir(small) / "contrast.npy")
    assert np.array_equal(data[N_TEST : 2 * N_TEST], D.corrupt_images(clean, "contrast", 2, workers=1))
    assert D.completed_severities("contrast", small) == [2]


def test_bad_requests_raise_clear_errors(small, monkeypatch):
    with pytest.raises(ValueError, match="unknown corruption"):
        D.ensure_demo_corrupted("gaussian_blur", 1, small)
    with pytest.raises(ValueError, match="severity must be"):
        D.ensure_demo_corrupted("fog", 6, small)
    with pytest.raises(ValueError, match="unknown demo split"):
        D.ensure_demo_clean(small, "val")
    monkeypatch.setenv("TEMPORA_DEMO_TEST_SIZE", "ten")
    with pytest.raises(ValueError, match="TEMPORA_DEMO_TEST_SIZE"):
        D.demo_dir(small)


def test_colour_statistics_do_not_reveal_the_class():
    """Nearest class mean on per-channel mean/std (a colour-only classifier) is near chance."""
    images, labels = D.generate_clean("train", 2000, workers=1)
    flat = images.reshape(len(images), -1, 3).astype(np.float64)
    feats = np.concatenate([flat.mean(1), flat.std(1)], axis=1)
    fit, held = slice(0, 1000), slice(1000, 2000)
    means = np.stack([feats[fit][labels[fit] == c].mean(0) for c in range(D.NUM_CLASSES)])
    scale = feats[fit].std(0)
    dist = (((feats[held][:, None] - means[None]) / scale) ** 2).sum(-1)
    acc = (dist.argmin(1) == labels[held]).mean()
    assert acc < 0.2, f"colour-only accuracy {acc:.3f} (chance 0.1)"
    # while shapes differ: the classes' mean images are not all alike at the centre vs border
    # (a sanity check that the images are not pure noise)
    assert images.std() > 30
