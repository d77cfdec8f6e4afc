"""Run the reference ImageNet-C corruption functions (the ``imagecorruptions`` package) on the
current numpy / scikit-image, deterministically and fast enough for 32x32 images.

``imagecorruptions`` 1.1.2 is the reference implementation of Hendrycks & Dietterich (ICLR
2019), but it was written for numpy 1.x and scikit-image < 0.19. We keep its functions and
patch only *its own module namespace* (nothing global), each patch for a stated reason:

* ``gaussian(..., multichannel=True)``: scikit-image 0.19 deprecated and 0.21 removed the
  ``multichannel`` keyword (``glass_blur`` fails). We translate it to ``channel_axis=-1``,
  which is the documented equivalent.
* ``np.float_``: removed in numpy 2.0 (``fog`` fails in ``plasma_fractal``). The module sees a
  numpy proxy that adds ``float_ = float64`` (the alias it always was) and forwards the rest.
* ``sk.util.random_noise``: since scikit-image 0.21 it draws from a *fresh*
  ``numpy.random.default_rng()`` unless given ``rng``, so ``impulse_noise`` ignored
  ``np.random.seed`` and differed on every call. The proxy passes a generator seeded from
  numpy's global (legacy) RNG, which every other corruption uses, so one ``np.random.seed``
  per image makes all 15 corruptions reproducible.
* ``cv2.imread`` / ``cv2.resize`` of the frost textures: ``frost`` reads and rescales a
  ~1000-pixel photo for every image, which dominates its cost on 32x32 inputs. The proxy
  memoises exactly those two calls (same file, same size, same interpolation give the same
  array), so the output is unchanged and 10,000 images take seconds instead of minutes.

Import ``corrupt`` from here, never from ``imagecorruptions`` directly.
"""

from __future__ import annotations

import inspect
import types
import warnings

import numba
import numpy as np

with warnings.catch_warnings():
    # pkg_resources / scipy.ndimage.interpolation deprecation warnings from the package import.
    warnings.simplefilter("ignore")
    import imagecorruptions
    import imagecorruptions.corruptions as _ref

import skimage as _sk
import skimage.filters as _skfilters
from PIL import Image

#: the 15 corruptions of ImageNet-C / CIFAR-10-C in the package's canonical order.
CORRUPTIONS: tuple[str, ...] = tuple(imagecorruptions.get_corruption_names("common"))


class _NumpyCompat(types.ModuleType):
    """numpy as the reference module expects it (numpy 1.x aliases)."""

    float_ = np.float64

    def __getattr__(self, name):
        return getattr(np, name)


class _SkimageUtilCompat(types.ModuleType):
    def __getattr__(self, name):
        return getattr(_sk.util, name)

    @staticmethod
    def random_noise(image, mode="gaussian", rng=None, clip=True, **kwargs):
        if rng is None:
            # draw the seed from the legacy global RNG so np.random.seed() governs the noise
            rng = np.random.default_rng(np.random.randint(0, 2**31 - 1))
        return _sk.util.random_noise(image, mode=mode, rng=rng, clip=clip, **kwargs)


class _SkimageCompat(types.ModuleType):
    util = _SkimageUtilCompat("skimage.util")

    def __getattr__(self, name):
        return getattr(_sk, name)


def _gaussian_compat(image, *args, multichannel=None, **kwargs):
    if multichannel is not None and "channel_axis" not in kwargs:
        kwargs["channel_axis"] = -1 if multichannel else None
    return _skfilters.gaussian(image, *args, **kwargs)


class _Cv2Compat(types.ModuleType):
    """cv2 with imread / resize of the frost textures memoised (pure functions of their args)."""

    def __init__(self, name, cv2_module):
        super().__init__(name)
        self._cv2 = cv2_module
        self._read: dict[str, np.ndarray] = {}
        self._resized: dict[tuple, np.ndarray] = {}

    def __getattr__(self, name):
        return getattr(self._cv2, name)

    def imread(self, filename, *args):
        key = (filename, *args)
        if key not in self._read:
            self._read[key] = self._cv2.imread(filename, *args)
            self._read[key].setflags(write=False)
        return self._read[key]

    def resize(self, src, dsize, *args, **kwargs):
        cached = any(src is arr for arr in self._read.values())
        if not cached:
            return self._cv2.resize(src, dsize, *args, **kwargs)
        key = (id(src), tuple(dsize), args, tuple(sorted(kwargs.items())))
        if key not in self._resized:
            out = self._cv2.resize(src, dsize, *args, **kwargs)
            out.setflags(write=False)
            self._resized[key] = out
        return self._resized[key]


@numba.njit(cache=True)
def _glass_shuffle(x, offsets, max_delta):
    height, width = x.shape[0], x.shape[1]
    k = 0
    for h in range(height - max_delta, max_delta, -1):
        for w in range(width - max_delta, max_delta, -1):
            dx, dy = offsets[k, 0], offsets[k, 1]
            k += 1
            for ch in range(x.shape[2]):
                x[h, w, ch] = x[h + dy, w + dx, ch]


_GLASS_PARAMS = [(0.7, 1, 2), (0.9, 2, 1), (1, 2, 3), (1.1, 3, 2), (1.5, 4, 2)]


def _glass_blur_fast(x, severity=1):
    """``imagecorruptions.corruptions.glass_blur`` with its shuffle loop compiled (same output)."""
    sigma, max_delta, iterations = _GLASS_PARAMS[severity - 1]
    x = np.uint8(_ref.gaussian(np.array(x) / 255.0, sigma=sigma, multichannel=True) * 255)
    if x.ndim != 3:
        raise ValueError("glass_blur expects an HxWxC image")
    steps = len(range(x.shape[0] - max_delta, max_delta, -1)) * len(range(x.shape[1] - max_delta, max_delta, -1))
    for _ in range(iterations):
        offsets = np.random.randint(-max_delta, max_delta, size=(steps, 2)).astype(np.int64)
        _glass_shuffle(x, offsets, max_delta)
    return np.clip(_ref.gaussian(x / 255.0, sigma=sigma, multichannel=True), 0, 1) * 255


#: the unmodified reference glass_blur (bound to the patched namespace), for the equality test.
reference_glass_blur = _ref.glass_blur


def _install() -> None:
    if getattr(_ref, "_tempora_compat", False):
        return
    if not hasattr(np, "float_"):
        _ref.np = _NumpyCompat("numpy")
    if "multichannel" not in inspect.signature(_skfilters.gaussian).parameters:
        _ref.gaussian = _gaussian_compat
    if "rng" in inspect.signature(_sk.util.random_noise).parameters:
        _ref.sk = _SkimageCompat("skimage")
    _ref.cv2 = _Cv2Compat("cv2", _ref.cv2)
    _ref._tempora_compat = True


_install()


def corrupt(image: np.ndarray, corruption: str, severity: int) -> np.ndarray:
    """One uint8 HxWx3 image corrupted by the reference function (reads ``np.random``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if corruption == "glass_blur":
            # same checks and uint8 truncation as imagecorruptions.corrupt, faster shuffle
            if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3 or not 1 <= severity <= 5:
                raise ValueError("glass_blur expects a uint8 HxWx3 image and severity 1..5")
            return np.uint8(_glass_blur_fast(Image.fromarray(image), severity))
        return imagecorruptions.corrupt(image, corruption_name=corruption, severity=severity)
