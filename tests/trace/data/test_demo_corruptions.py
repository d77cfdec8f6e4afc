"""The reference ImageNet-C corruptions (imagecorruptions) run on 32x32 images under the
compat shim: all 15 x 5 work, are seeded by numpy's global RNG, and the fast glass_blur is
bit-identical to the reference function."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from tempora_trace.data import _corruptions_compat as cc
from tempora_trace.data import demo as D


@pytest.fixture(scope="module")
def images():
    imgs, _ = D.generate_clean("test", 4, workers=1)
    return imgs


@pytest.mark.parametrize("corruption", D.DEMO_CORRUPTIONS)
def test_every_corruption_runs_at_every_severity(images, corruption):
    for severity in D.SEVERITIES:
        for img in images:
            np.random.seed(7)
            out = cc.corrupt(img, corruption, severity)
            assert out.shape == (32, 32, 3) and out.dtype == np.uint8
            np.random.seed(7)
            assert np.array_equal(out, cc.corrupt(img, corruption, severity)), "not reproducible under np.random.seed"
        # not a no-op on 32x32 images
        changed = np.mean([np.abs(cc.corrupt(i, corruption, severity).astype(int) - i).mean() for i in images])
        assert changed > 0.5, f"{corruption}@{severity} barely changes the image ({changed:.2f})"


def test_glass_blur_fast_path_equals_reference(images):
    for severity in D.SEVERITIES:
        for k, img in enumerate(images):
            np.random.seed(100 + k)
            expected = np.uint8(cc.reference_glass_blur(Image.fromarray(img), severity))
            np.random.seed(100 + k)
            assert np.array_equal(cc.corrupt(img, "glass_blur", severity), expected)


def test_frost_cache_does_not_change_output(images):
    import imagecorruptions.corruptions as ref

    np.random.seed(3)
    first = cc.corrupt(images[0], "frost", 4)
    ref.cv2._read.clear()
    ref.cv2._resized.clear()
    np.random.seed(3)
    assert np.array_equal(first, cc.corrupt(images[0], "frost", 4))


def test_impulse_noise_follows_global_seed(images):
    np.random.seed(1)
    a = cc.corrupt(images[0], "impulse_noise", 5)
    np.random.seed(2)
    b = cc.corrupt(images[0], "impulse_noise", 5)
    assert not np.array_equal(a, b)


def test_severity_slice_seeds_do_not_depend_on_chunking(images):
    whole = D.corrupt_images(images, "shot_noise", 4, workers=1, chunk=4)
    pieces = D.corrupt_images(images, "shot_noise", 4, workers=1, chunk=1)
    assert np.array_equal(whole, pieces)
