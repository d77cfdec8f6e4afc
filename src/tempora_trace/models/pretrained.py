"""Pretrained weights: where each library keeps them, and fetching them when they are missing.

The file names, URLs and preprocessing constants come from the libraries that publish the
weights (torchvision's weights enums, timm's pretrained configs), and the files live where
those libraries look for them (torch hub's checkpoint folder, the Hugging Face cache), so a
file another tool already downloaded is found and one Tempora downloads serves other tools.

A missing file is downloaded the library's own way (``torch.hub.download_url_to_file`` with
its SHA-256 check, ``huggingface_hub.hf_hub_download``) with a progress bar on stderr, unless downloads are off:
``offline=True`` (``tempora-trace --offline``), ``TEMPORA_OFFLINE=1`` or ``HF_HUB_OFFLINE=1``.
Offline, a missing file is a :class:`WeightsError` naming the file and where to put it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from urllib.parse import urlparse

import torch

from ..errors import WeightsError

_TRUE = {"1", "true", "yes", "on"}
_OFFLINE: ContextVar[bool | None] = ContextVar("tempora_offline", default=None)


@contextmanager
def offline_mode(offline: bool | None) -> Iterator[None]:
    """Within the block, downloads are off (True), on (False) or as the environment says (None).
    ``get_model(offline=…)`` uses it, so model builders keep their two-argument signature."""
    token = _OFFLINE.set(offline)
    try:
        yield
    finally:
        _OFFLINE.reset(token)


def downloads_off(offline: bool | None = None) -> bool:
    """``offline`` if given, else the enclosing :func:`offline_mode`, else whether
    ``TEMPORA_OFFLINE`` or ``HF_HUB_OFFLINE`` is set true."""
    if offline is None:
        offline = _OFFLINE.get()
    if offline is not None:
        return offline
    return any(os.environ.get(var, "").strip().lower() in _TRUE for var in ("TEMPORA_OFFLINE", "HF_HUB_OFFLINE"))


def _say(message: str) -> None:
    print(f"tempora-trace: {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------ torchvision
def torchvision_weights(arch: str):
    """The ImageNet weights enum member the paper's ResNets use (``IMAGENET1K_V1``)."""
    from torchvision.models import get_model_weights  # lazy: importing torchvision costs a process about 1.5 s (it loads torch._dynamo)

    return get_model_weights(arch).IMAGENET1K_V1


def torchvision_url(arch: str) -> str:
    return torchvision_weights(arch).url


def torchvision_file(arch: str) -> Path:
    """Where torch hub keeps the file: ``$TORCH_HOME/hub/checkpoints/<file of the URL>``."""
    return url_file(torchvision_url(arch))


def fetch_torchvision(arch: str, offline: bool | None = None) -> Path:
    """The weights file of ``arch``, downloaded into torch hub's folder if missing and allowed."""
    return fetch_url(torchvision_url(arch), arch, offline, what="torchvision's IMAGENET1K_V1 file")


def url_file(url: str) -> Path:
    """Where torch hub keeps the file of ``url``: ``$TORCH_HOME/hub/checkpoints/<its name>``."""
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(url).path)


def fetch_url(url: str, arch: str, offline: bool | None = None, what: str = "the file") -> Path:
    """The weights file published at ``url`` (torchvision's enums, timm's URL-only configs),
    from torch hub's folder, downloaded into it if missing and allowed."""
    path = url_file(url)
    if path.is_file():
        return path
    hint = f"put {what} {path.name} in {path.parent}/ (from {url}) or pass --weights FILE"
    if downloads_off(offline):
        raise WeightsError(f"no weights for '{arch}' and downloads are off: {hint}")
    _say(f"downloading the weights of '{arch}' from {url} into {path.parent}/")
    path.parent.mkdir(parents=True, exist_ok=True)
    digits = torch.hub.HASH_REGEX.search(path.name)  # torch hub names carry a SHA-256 prefix
    try:
        # written to a temporary file and moved into place: an interrupted download leaves nothing
        torch.hub.download_url_to_file(url, str(path), digits.group(1) if digits else None, progress=True)
    except Exception as exc:  # network down, proxy, hash mismatch: say what to do instead
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise WeightsError(f"could not download the weights of '{arch}' ({reason}); {hint}") from None
    return path


# ------------------------------------------------------------------------ timm / Hugging Face
def timm_pretrained_cfg(name: str):
    """timm's pretrained config of ``name`` (``arch.tag``): its Hub repo, mean/std, input size."""
    from timm.models import get_pretrained_cfg  # optional stack, loaded only for a timm model

    cfg = get_pretrained_cfg(name)
    if cfg is None or not cfg.hf_hub_id:
        raise WeightsError(f"timm knows no Hugging Face weights named '{name}'")
    return cfg


def cached_hf_file(repo: str, filename: str) -> Path | None:
    """``filename`` of ``repo`` from the Hugging Face cache, found without network access."""
    from huggingface_hub import try_to_load_from_cache  # optional stack, loaded only for weights on the Hugging Face Hub

    found = try_to_load_from_cache(repo, filename)
    return Path(found) if isinstance(found, str) else None


def fetch_hf(repo: str, filename: str, model: str, offline: bool | None = None) -> Path:
    """``filename`` of Hub ``repo`` from the cache, downloaded into it if missing and allowed."""
    path = cached_hf_file(repo, filename)
    if path is not None:
        return path
    hint = f"put {filename} of the Hugging Face repo {repo} in your HF cache (hf download {repo} {filename}) or pass --weights FILE"
    if downloads_off(offline):
        raise WeightsError(f"no weights for '{model}' and downloads are off: {hint}")
    from huggingface_hub import hf_hub_download  # optional stack, loaded only for weights on the Hugging Face Hub

    _say(f"downloading the weights of '{model}' from the Hugging Face repo {repo} into the HF cache")
    try:
        return Path(hf_hub_download(repo, filename))
    except Exception as exc:  # offline hub, unreachable host, gated repo: say what to do instead
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise WeightsError(f"could not download the weights of '{model}' ({reason}); {hint}") from None
