"""Models the user brings: any timm or torchvision classifier by name, or a factory in their own code.

Spec strings (``--model``):

* ``timm:NAME``: any timm model (``timm:mobilenetv3_small_100``, ``timm:resnet50_gn.a1h_in1k``
  for one pretrained tag, ``timm:hf-hub:ORG/REPO`` where timm takes Hub names);
* ``torchvision:NAME[:WEIGHTS]``: any torchvision classification model, its weights enum
  member (``IMAGENET1K_V2``) or ``DEFAULT`` (the default when WEIGHTS is left out);
* ``MODULE:FACTORY`` or ``PATH.py:FACTORY``: a callable in an importable module or a Python
  file that returns an ``nn.Module`` taking float images in [0, 1] (it is given
  ``num_classes=`` when it accepts it).

Preprocessing (input size, resize, interpolation, mean and std) comes from the library's own
configuration of the weights (timm's pretrained config, the torchvision weights enum's
transforms); a library model is wrapped in :class:`~tempora_trace.models.Normalized` so it too
takes [0, 1] input. A factory's model normalises itself; ``--input-size`` gives its side.

Pretrained weights are found or fetched where the library keeps them, through
:mod:`.pretrained` (so ``--offline`` and ``TEMPORA_OFFLINE`` hold); ``--weights random``
builds the architecture untrained with the dataset's class count; ``--weights FILE`` loads a
state_dict. The identity of what was built (spec, library and version, the weights' SHA-256,
the source file's SHA-256) is :attr:`ModelSpec.source`, written into the trace's metadata.
"""

from __future__ import annotations

import difflib
import hashlib
import inspect
import json
import math
import os
import sys
import traceback
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, packages_distributions, version
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from .. import user_code
from ..errors import ConfigError, UserCodeError, WeightsError
from ..preprocess import Preprocess
from . import pretrained

#: the side a factory model gets when neither ``--input-size`` nor the model says otherwise.
DEFAULT_INPUT_SIZE = 224
#: The image sides a model may take (``--input-size`` or what the model states itself), px.
MIN_INPUT_SIZE, MAX_INPUT_SIZE = 8, 8192
#: ImageNet statistics: torchvision's normalisation for a model whose enum has no weights.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: Short names of the models the paper's reference code runs beside the built-ins, and the
#: library spec each stands for (the first two are what edge deployments run).
SHORT_NAMES: dict[str, str] = {
    "mobilenet_v2": "torchvision:mobilenet_v2:IMAGENET1K_V1",
    "mobilenet_v3_small": "torchvision:mobilenet_v3_small:IMAGENET1K_V1",
    "resnet50_gn": "timm:resnet50_gn.a1h_in1k",
}


@dataclass(frozen=True)
class ModelRef:
    """A parsed ``--model`` spec: ``kind`` is timm, torchvision, module or file."""

    kind: str
    name: str  # timm/torchvision model name, module name or file path
    tag: str | None = None  # pretrained tag / weights enum member / factory name

    @property
    def label(self) -> str:
        """The model as the trace identity names it: the spec, a file by its name only (so
        traces of one model taken on two machines, in two folders, share a group)."""
        if self.kind == "timm":
            return f"timm:{self.name}"
        if self.kind == "torchvision":
            return f"torchvision:{self.name}" + (f":{self.tag}" if self.tag else "")
        if self.kind == "file":
            return f"{Path(self.name).name}:{self.tag}"
        return f"{self.name}:{self.tag}"


def parse_spec(text: str) -> ModelRef | None:
    """The model a ``--model`` spec names, or None for a built-in (registry) name."""
    if text.startswith("timm:"):
        name = text[5:]
        if not name:
            raise ConfigError("--model timm:NAME needs a model name (e.g. timm:mobilenetv3_small_100)")
        return ModelRef("timm", name)
    if text.startswith("torchvision:"):
        rest = text[len("torchvision:") :]
        name, _, tag = rest.partition(":")
        if not name:
            raise ConfigError("--model torchvision:NAME[:WEIGHTS] needs a model name (e.g. torchvision:mobilenet_v2)")
        return ModelRef("torchvision", name, tag or None)
    if ":" not in text:
        return None
    target, _, factory = text.rpartition(":")
    if not target or not factory or not factory.isidentifier():
        raise ConfigError(f"--model '{text}': expected MODULE:FACTORY or PATH.py:FACTORY (FACTORY a Python name)")
    if target.endswith(".py") or "/" in target or os.sep in target:
        return ModelRef("file", target, factory)
    return ModelRef("module", target, factory)


def is_external(name: str) -> bool:
    return name in SHORT_NAMES or ":" in name


def model_label(name: str) -> str:
    """The name a trace records for ``--model name`` (built-in and short names unchanged)."""
    ref = parse_spec(name) if name not in SHORT_NAMES else None
    return name if ref is None else ref.label


def close_matches(word: str, candidates, n: int = 3) -> str:
    found = difflib.get_close_matches(word, list(candidates), n=n, cutoff=0.6)
    return f"; close matches: {', '.join(found)}" if found else ""


def state_identity(module: nn.Module) -> str:
    """``sha256:<hex>`` of a module's state (names, dtypes, shapes and bytes, in key order):
    the weights identity of a factory's own parameters."""
    digest = hashlib.sha256()
    for key, value in sorted(module.state_dict().items()):
        digest.update(key.encode())
        if torch.is_tensor(value):
            t = value.detach().cpu().contiguous()
            digest.update(f"{t.dtype}{tuple(t.shape)}".encode())
            digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return "sha256:" + digest.hexdigest()


# ------------------------------------------------------------------------ the user's code
def _format_exc(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def import_user_module(ref: ModelRef):
    """Import the module of a ``module`` or ``file`` spec through the one loader of user code;
    failures are one line naming the module and the exception (the traceback kept for
    ``--debug``)."""
    if ref.kind == "file":
        path = Path(ref.name).expanduser()
        try:
            return user_code.load_file(path).module
        except (FileNotFoundError, IsADirectoryError):
            raise ConfigError(f"--model {ref.name}:{ref.tag}: no such file {path}") from None
        except user_code.NotPythonError:
            raise ConfigError(f"--model {ref.name}:{ref.tag}: {path} is not a Python file") from None
        except user_code.UserImportError as failed:  # the user's file: any error (sys.exit() too) is theirs, in one line
            raise UserCodeError(f"cannot import {path}: {_format_exc(failed.cause)}", _traceback(failed.cause)) from None
    added = os.getcwd() not in sys.path and "" not in sys.path
    if added:  # a console script does not put the working folder on the path; `python -m` does
        sys.path.insert(0, os.getcwd())
    try:
        return user_code.import_module(ref.name)
    except (Exception, SystemExit) as exc:
        raise UserCodeError(f"cannot import module '{ref.name}': {_format_exc(exc)}", _traceback(exc)) from None
    finally:
        if added:
            sys.path.remove(os.getcwd())


def call_factory(ref: ModelRef, num_classes: int | None) -> nn.Module:
    """The ``nn.Module`` the spec's factory returns (given ``num_classes=`` when it takes it)."""
    module = import_user_module(ref)
    where = f"{ref.name}:{ref.tag}"
    factory = getattr(module, ref.tag or "", None)
    if factory is None:
        names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n, None))]
        raise ConfigError(f"--model {where}: {ref.name} has no '{ref.tag}'{close_matches(ref.tag or '', names)}")
    if not callable(factory):
        raise ConfigError(f"--model {where}: '{ref.tag}' is a {type(factory).__name__}, not a callable that builds a model")
    kwargs = {}
    if num_classes is not None:
        try:
            params = inspect.signature(factory).parameters
        except (TypeError, ValueError):
            params = {}
        if "num_classes" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            kwargs["num_classes"] = num_classes
    try:
        net = factory(**kwargs)
    except (Exception, SystemExit) as exc:
        raise UserCodeError(f"--model {where}: the factory raised {_format_exc(exc)}", _traceback(exc)) from None
    if not isinstance(net, nn.Module):
        raise ConfigError(f"--model {where}: the factory returned a {type(net).__name__}, not a torch.nn.Module")
    return net


def probe_output(net: nn.Module, size: int, label: str) -> int:
    """Run two random [0, 1] images of ``size`` px through ``net`` and return its class count,
    so a model that cannot take the input, or does not return (batch, classes) logits, is
    refused before anything is written."""
    x = torch.rand(2, 3, size, size, generator=torch.Generator().manual_seed(0))
    was_training = net.training
    net.eval()
    try:
        with torch.no_grad():
            out = net(x)
    except (Exception, SystemExit) as exc:
        raise UserCodeError(
            f"model '{label}' fails on a 2x3x{size}x{size} input ({_format_exc(exc)}); pass --input-size for its image side",
            _traceback(exc),
        ) from None
    finally:
        net.train(was_training)
    if not torch.is_tensor(out) or out.dim() != 2 or out.shape[0] != 2:
        shape = tuple(out.shape) if torch.is_tensor(out) else type(out).__name__
        raise ConfigError(f"model '{label}' returns {shape} for a batch of 2 images; it must return (batch, classes) logits")
    return int(out.shape[1])


def _declared_size(net: nn.Module) -> int | None:
    """The image side a model states itself: ``input_size`` or a timm-style config."""
    for value in (getattr(net, "input_size", None), (getattr(net, "pretrained_cfg", None) or {}).get("input_size")):
        if isinstance(value, int) and value > 0:
            return value
        if isinstance(value, (tuple, list)) and value and isinstance(value[-1], int) and value[-1] > 0:
            return int(value[-1])
    return None


def randomize(net: nn.Module) -> None:
    """Re-initialise every submodule that can (``reset_parameters``): ``--weights random``."""
    for m in net.modules():
        reset = getattr(m, "reset_parameters", None)
        if callable(reset):
            reset()


# ------------------------------------------------------------------------ timm
def _timm():
    try:
        import timm  # optional stack, loaded only for a timm model
    except ImportError:
        raise ConfigError("--model timm:NAME needs the 'timm' package (pip install timm)") from None
    return timm


def _timm_file(cfg) -> Path:
    """The weights of a timm pretrained config: the Hugging Face cache, else the torch hub
    folder (weights published only by URL), fetched when missing and allowed."""
    label = f"timm:{cfg.architecture}.{cfg.tag}" if cfg.tag else f"timm:{cfg.architecture}"
    if cfg.hf_hub_id:
        for filename in ("model.safetensors", "pytorch_model.bin"):
            found = pretrained.cached_hf_file(cfg.hf_hub_id, filename)
            if found is not None:
                return found
        return pretrained.fetch_hf(cfg.hf_hub_id, "model.safetensors", label)
    if cfg.url:
        return pretrained.fetch_url(cfg.url, label)
    raise WeightsError(f"timm publishes no weights for '{label}'; pass --weights FILE or --weights random")


def _build_timm_hub(timm, name: str, weights, num_classes: int | None, label: str):
    """A ``hf-hub:ORG/REPO`` model: its ``config.json`` (architecture, arguments, pretrained
    config) and weights found in the Hugging Face cache, or fetched into it when allowed
    (:func:`.pretrained.fetch_hf`), then built by timm from the config."""
    from . import _load_into, _resolve  # lazy: this package imports this module at its top (a cycle otherwise)

    repo = name[len("hf-hub:") :].split("@")[0]
    if not repo or "/" not in repo:
        raise ConfigError(f"--model timm:{name}: expected timm:hf-hub:ORG/REPO")
    config_file = pretrained.fetch_hf(repo, "config.json", label)
    try:
        config = json.loads(Path(config_file).read_text(encoding="utf-8"))
        arch = config["architecture"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise WeightsError(f"{config_file} is not a timm model config ({_format_exc(exc)})") from None
    if not timm.is_model(arch):
        raise ConfigError(f"{repo} names timm model '{arch}', which this timm {timm.__version__} does not have")
    random_init = weights is not None and str(weights) == "random"
    if weights is None:
        found = pretrained.cached_hf_file(repo, "model.safetensors") or pretrained.cached_hf_file(repo, "pytorch_model.bin")
        path = found or pretrained.fetch_hf(repo, "model.safetensors", label)
    else:
        path = _resolve(weights, lambda: None)
    classes = int(config.get("num_classes") or 1000) if weights is None else (num_classes or 1000)
    kwargs = dict(config.get("model_args") or {})
    kwargs["num_classes"] = classes
    try:
        net = timm.create_model(arch, pretrained=False, pretrained_cfg=config.get("pretrained_cfg"), **kwargs)
    except Exception as exc:  # arguments from the repo's config that this timm does not take
        raise WeightsError(f"timm cannot build {repo} from its config.json ({_format_exc(exc)})") from None
    if path is not None:
        _load_into(net, path, label)
    return net, None if random_init else path


def build_timm(name: str, weights, num_classes: int | None, input_size: int | None, label: str | None = None):
    from . import ModelSpec, Normalized, _load_into, _resolve  # lazy: this package imports this module at its top (a cycle otherwise)

    timm = _timm()
    label = label or f"timm:{name}"
    hub = name.startswith("hf-hub:")
    cfg = None
    if not hub:
        arch, _, tag = name.partition(".")
        if not timm.is_model(arch):
            raise ConfigError(f"unknown timm model '{arch}'{close_matches(arch, timm.list_models())}")
        if weights is None or tag:
            from timm.models import get_pretrained_cfg  # optional stack, loaded only for a timm model

            try:
                cfg = get_pretrained_cfg(name)
            except RuntimeError:  # a tag the architecture does not have
                cfg = None
            if cfg is None:
                tags = timm.list_pretrained(f"{arch}.*")
                raise ConfigError(f"timm has no pretrained weights '{name}'{close_matches(name, tags)}")
    if hub:
        net, path = _build_timm_hub(timm, name, weights, num_classes, label)
    else:
        path = _resolve(weights, lambda: _timm_file(cfg))
        # the library's class count for its weights; the dataset's for random or own weights
        classes = cfg.num_classes if weights is None else (num_classes or 1000)
        net = timm.create_model(name, pretrained=False, num_classes=classes)
        if path is not None:
            _load_into(net, path, label)
    data = timm.data.resolve_data_config({}, model=net)
    size = int(input_size or data["input_size"][-1])
    crop_pct = float(data.get("crop_pct") or 1.0)
    pre = Preprocess(
        size,
        int(math.floor(size / crop_pct)),
        str(data.get("interpolation") or "bilinear"),
        tuple(float(v) for v in data["mean"]),
        tuple(float(v) for v in data["std"]),
    )
    model = Normalized(net, pre.mean, pre.std)
    classes = int(getattr(net, "num_classes", 0) or 0) or probe_output(model, size, label)
    source = {"kind": "timm", "library": "timm", "library_version": timm.__version__}
    if cfg is not None and weights is None:
        source["pretrained"] = f"{cfg.architecture}.{cfg.tag}" if cfg.tag else cfg.architecture
    spec = ModelSpec(label, "bn", classes, size, "imagenet", None if path is None else str(path), preprocess=pre, source=source)
    return model, spec


# ------------------------------------------------------------------------ torchvision
def _tv_weights(name: str, tag: str | None):
    """The weights enum member ``tag`` (``DEFAULT`` when None) of torchvision model ``name``,
    or None when the model has no published weights."""
    from torchvision.models import get_model_weights  # lazy: importing torchvision costs a process about 1.5 s (it loads torch._dynamo)

    try:
        enum = get_model_weights(name)
    except (ValueError, KeyError):
        if tag not in (None, "DEFAULT"):
            raise ConfigError(f"torchvision model '{name}' has no published weights '{tag}'") from None
        return None
    members = [m.name for m in enum]
    if tag is None or tag == "DEFAULT":
        return getattr(enum, "DEFAULT", None) or (enum[members[0]] if members else None)
    if tag not in members:
        raise ConfigError(f"torchvision model '{name}' has no weights '{tag}'; available: DEFAULT, {', '.join(members)}")
    return enum[tag]


def build_torchvision(name: str, tag: str | None, weights, num_classes: int | None, input_size: int | None, label: str | None = None):
    import torchvision  # lazy: importing torchvision costs a process about 1.5 s (it loads torch._dynamo)
    from torchvision import models as tvm

    from . import ModelSpec, Normalized, _load_into, _resolve  # lazy: this package imports this module at its top (a cycle otherwise)

    label = label or ("torchvision:" + name + (f":{tag}" if tag else ""))
    available = tvm.list_models(module=tvm)  # classification models only
    if name not in available:
        raise ConfigError(f"unknown torchvision classification model '{name}'{close_matches(name, available)}")
    member = _tv_weights(name, tag)
    random_init = weights is not None and str(weights) == "random"
    if weights is None and member is None:
        raise WeightsError(f"torchvision publishes no weights for '{name}'; pass --weights FILE or --weights random")
    path = _resolve(weights, lambda: pretrained.fetch_url(member.url, label))
    classes = len(member.meta["categories"]) if weights is None else (num_classes or 1000)
    kwargs: dict[str, Any] = {"num_classes": classes}
    if name in ("inception_v3", "googlenet") and member is not None and not random_init:
        kwargs.update(transform_input=True, aux_logits=True, init_weights=False)  # as torchvision builds them with weights
    net = tvm.get_model(name, weights=None, **kwargs)
    if path is not None:
        _load_into(net, path, label)
    if member is not None:
        t = member.transforms()
        size = int(input_size or t.crop_size[0])
        resize = int(t.resize_size[0]) if input_size is None else int(math.floor(size * t.resize_size[0] / t.crop_size[0]))
        pre = Preprocess(size, resize, str(t.interpolation.value), tuple(t.mean), tuple(t.std))
    else:
        size = int(input_size or DEFAULT_INPUT_SIZE)
        pre = Preprocess(size, int(math.floor(size * 256 / 224)), "bilinear", IMAGENET_MEAN, IMAGENET_STD)
    source = {"kind": "torchvision", "library": "torchvision", "library_version": torchvision.__version__}
    if member is not None and weights is None:
        source["pretrained"] = f"{type(member).__name__}.{member.name}"
    spec = ModelSpec(label, "bn", classes, size, "imagenet", None if path is None else str(path), preprocess=pre, source=source)
    return Normalized(net, pre.mean, pre.std), spec


# ------------------------------------------------------------------------ the user's factory
def build_factory(ref: ModelRef, weights, num_classes: int | None, input_size: int | None):
    from . import ModelSpec, _load_into  # lazy: this package imports this module at its top (a cycle otherwise)

    net = call_factory(ref, num_classes)
    meta = next((n for n, t in [*net.named_parameters(), *net.named_buffers()] if t.device.type == "meta"), None)
    if meta is not None:
        raise ConfigError(
            f"--model {ref.name}:{ref.tag}: the factory returned a model on the meta device ({meta} holds no data); "
            "build it on the CPU (Tempora moves it to --device)"
        )
    path = None
    if weights is not None and str(weights) == "random":
        randomize(net)
        weights_id = "random"
    elif weights is not None:
        path = Path(weights).expanduser()
        if not path.is_file():
            raise WeightsError(f"weights file not found: {path}")
        _load_into(net, path, ref.label)
        weights_id = None  # the file's hash
    else:
        weights_id = state_identity(net)
    declared = None if input_size else _declared_size(net)
    if declared is not None and not MIN_INPUT_SIZE <= declared <= MAX_INPUT_SIZE:
        raise ConfigError(
            f"model '{ref.label}' states input_size {declared}, outside {MIN_INPUT_SIZE}..{MAX_INPUT_SIZE} px; pass --input-size for its image side"
        )
    size = int(input_size or declared or DEFAULT_INPUT_SIZE)
    classes = probe_output(net, size, ref.label)
    source: dict[str, Any] = {"kind": "factory", "factory": ref.tag}
    if ref.kind == "file":
        file = Path(ref.name).expanduser()
        # the file's code as the loader took it: its bytes, and the helpers it imports from its folder
        source.update(file=str(file.resolve()), file_sha256=user_code.load_file(file).sha256)
    else:
        module = sys.modules.get(ref.name)
        source.update(module=ref.name, module_file=getattr(module, "__file__", None))
        top = ref.name.split(".")[0]
        dist_version = _distribution_version(top)
        if dist_version:
            source["module_version"] = dist_version
    if weights_id is not None and weights_id != "random":
        source["parameters"] = "the factory's own"
    pre = Preprocess(size, size, "bilinear", None, None)
    spec = ModelSpec(
        ref.label,
        "bn",
        classes,
        size,
        "imagenet",
        None if path is None else str(path),
        preprocess=pre,
        source=source,
        weights_id=weights_id,
    )
    return net, spec


def _distribution_version(top_module: str) -> str | None:
    try:
        dists = packages_distributions().get(top_module) or []
        return f"{dists[0]} {version(dists[0])}" if dists else None
    except (PackageNotFoundError, OSError, ValueError):
        return None


def build_external(name: str, weights, num_classes: int | None, input_size: int | None):
    """Build the model of an external spec or short name (see the module doc)."""
    if name in SHORT_NAMES:
        ref = parse_spec(SHORT_NAMES[name])
        assert ref is not None
        if ref.kind == "timm":
            model, spec = build_timm(ref.name, weights, num_classes, input_size, label=name)
        else:
            model, spec = build_torchvision(ref.name, ref.tag, weights, num_classes, input_size, label=name)
        return model, spec
    ref = parse_spec(name)
    assert ref is not None
    if ref.kind == "timm":
        return build_timm(ref.name, weights, num_classes, input_size)
    if ref.kind == "torchvision":
        return build_torchvision(ref.name, ref.tag, weights, num_classes, input_size)
    return build_factory(ref, weights, num_classes, input_size)
