"""What the trace run, the profile run and the live run share beyond
:class:`~tempora_trace.runner.MethodRun`: the episodes of a configured stream and the checks
made on them before anything is timed (folder images, a model that fits its method), the RNG
state a frozen evaluation saves and restores, the one-line episode summary, and the failures
of a method's predictions.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

import tempora_schema as schema
from tempora_toolkit.command_line import visible

from .config import TraceConfig
from .data import Episode
from .data.streams import plan_stream
from .errors import ConfigError, TraceError
from .methods.base import TTAMethod
from .methods.gradient import NORM_NAMES, incompatibility_message
from .norms import describe_norms, method_fits
from .staging import default_workers


# ------------------------------------------------------------------------ streams
def build_episodes(open_domain, cfg: TraceConfig) -> list[Episode]:
    """The episodes of ``cfg``'s stream (:func:`~tempora_trace.data.streams.plan_stream`), each
    domain opened by ``open_domain(name, severity)``."""
    return plan_stream(cfg.stream, cfg.domains or [], open_domain, cfg.severity, cfg.batch_size, cfg.seed, cfg.max_batches)


def check_folder_images(episodes: Sequence[Episode]) -> None:
    """Open the header of every image the run's batches use (the line names a bad file)."""
    used: dict[str, tuple] = {}  # a domain's images once, however many ramp steps and rounds replay them
    for ep in episodes:
        for domain, batches in zip(ep.domains, ep.batches):
            check = getattr(domain.source, "check_readable", None)
            if check is not None and batches:
                used.setdefault(domain.name, (check, []))[1].extend(batches)
    for check, batches in used.values():
        check(np.unique(np.concatenate(batches)), workers=default_workers(os.cpu_count()))


def left_over_images(episodes: Sequence[Episode], cfg: TraceConfig) -> list[str]:
    """One line per domain whose image count is not a multiple of the batch size (and whose
    stream ``--max-batches`` does not cut anyway): the images left out of its batches."""
    lines: list[str] = []
    for ep in episodes:
        for domain, batches in zip(ep.domains, ep.batches):
            used, total = sum(len(b) for b in batches), len(domain.source)
            if used < total and (cfg.max_batches is None or len(batches) < cfg.max_batches):
                if any(f"domain '{domain.name}' holds" in line for line in lines):  # a later round or ramp step of it
                    continue
                lines.append(
                    f"domain '{domain.name}' holds {total} images: its stream uses {used} in batches of {cfg.batch_size} and "
                    f"leaves out {total - used} (a fixed random choice, the same on every run); they are neither traced nor checked"
                )
    return lines


def check_model_fits(cfg: TraceConfig, dataset, model_spec, method_cls) -> None:
    """The model takes the dataset's images, outputs its classes, and the method handles the
    model's normalisation layers: each a one-line ConfigError otherwise."""
    model = cfg.model
    if not dataset.folder and model_spec.source is None and model_spec.family != dataset.family:
        raise ConfigError(
            f"model '{model}' is built for {model_spec.family} inputs ({model_spec.input_size}px); "
            f"dataset '{cfg.dataset}' is {dataset.family} (default model: {dataset.default_model})"
        )
    if dataset.class_mask is not None:
        if max(dataset.class_mask) >= model_spec.num_classes:
            raise ConfigError(
                f"--class-map maps a class folder onto index {max(dataset.class_mask)}, but model '{model}' outputs "
                f"{model_spec.num_classes} classes (0..{model_spec.num_classes - 1})"
            )
    elif model_spec.num_classes != dataset.model_classes:
        what = f"{dataset.model_classes} class folders" if dataset.folder else f"{dataset.model_classes} classes"
        hint = (
            "; pass --class-map FILE to map the folders onto its classes, or --weights random to build it for yours"
            if dataset.folder
            else "; pass --weights random (timing only) or weights trained on this dataset"
        )
        raise ConfigError(f"model '{model}' outputs {model_spec.num_classes} classes but dataset '{cfg.dataset}' has {what}{hint}")
    if not method_fits(method_cls, model_spec.norms):
        kinds = model_spec.norms
        found = (
            f"model '{model}' uses {NORM_NAMES[next(iter(kinds))]}" if len(kinds) == 1 else f"model '{model}' has {describe_norms(kinds)}"
        )
        raise ConfigError(incompatibility_message(method_cls, found))


# ------------------------------------------------------------------------ state
def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def capture_rng(device: torch.device) -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def host_snapshot(method: TTAMethod) -> dict[str, Any]:
    """``method.snapshot()`` with the model state moved to host memory, so a snapshot held
    across timed events never inflates their measured peak device memory. ``restore`` copies
    it back in place (``load_state_dict``); optimiser and extra state stay as the method made
    them (small, and method-specific types)."""
    snap = method.snapshot()
    snap["model"] = {k: (v.to("cpu") if torch.is_tensor(v) else v) for k, v in snap["model"].items()}
    return snap


@dataclass
class EpisodeSummary:
    episode: str
    batches: int
    accuracy: float
    mean_e_ms: float
    mean_l_ms: float
    mean_delta_ms: float
    checkpoints: int

    def line(self) -> str:
        return (
            f"{visible(self.episode):<20} acc {100 * self.accuracy:6.2f}%  e {self.mean_e_ms:8.2f} ms  "
            f"ℓ {self.mean_l_ms:8.2f} ms  δ {self.mean_delta_ms:8.2f} ms  "
            f"({self.batches} batches, {self.checkpoints} checkpoints)"
        )


def summarize(name: str, table) -> EpisodeSummary:
    d = table.to_pydict()
    idx = [i for i, p in enumerate(d["phase"]) if p == schema.PHASE_ADAPT]
    n = sum(d["n"][i] for i in idx)
    ckpts = {d["checkpoint"][i] for i, p in enumerate(d["phase"]) if p == schema.PHASE_FROZEN}
    mean = lambda col: float(np.mean([d[col][i] for i in idx])) if idx else 0.0  # noqa: E731
    return EpisodeSummary(
        name, len(idx), sum(d["correct"][i] for i in idx) / max(n, 1), mean("e_ms"), mean("l_ms"), mean("delta_ms"), len(ckpts)
    )


# ------------------------------------------------------------------------ the run
class MethodFailure(TraceError):
    """A method that is not built in raised inside ``predict``/``adapt`` (or while being built)."""


class PredictionError(MethodFailure):
    """A method's ``predict`` returned something that cannot be scored as it is: not a tensor,
    not ``(n, num_classes)``, not a real floating-point dtype, not on the run's device, or
    holding NaN or ∞. Checked after the event's clock stopped (:meth:`MethodRun.check_prediction`),
    for built-in methods too (NaN weights reach a built-in's logits as well)."""


def prediction_problem(logits: Any, n: int, num_classes: int, device: torch.device) -> str | None:
    """What makes ``logits`` unusable as the prediction for a batch of ``n`` (one phrase), or
    None. Reads only the tensor's attributes: nothing waits for the device."""
    if not isinstance(logits, torch.Tensor):
        return f"a {type(logits).__name__}, not a tensor of (n, num_classes) logits"
    shape = tuple(logits.shape)
    if shape != (n, num_classes):
        return f"shape {shape} for a batch of {n}, not ({n}, {num_classes})"
    if not logits.dtype.is_floating_point or logits.dtype.is_complex:
        return f"dtype {str(logits.dtype).replace('torch.', '')}, not a real floating-point type"
    if logits.device != device:
        return f"a tensor on device {logits.device}, not on the run's device {device}"
    return None


#: The one phrase for a prediction holding NaN or ∞ (found where its values are read).
NON_FINITE = "values that are NaN or infinite (the model's weights or the method's updates diverged)"


#: the seed of the fixed order in which a method's source samples are drawn from the clean split
SOURCE_SAMPLE_SEED = 0


def clean_images(dataset: Any, root: Path | None, n: int, batch_size: int) -> Iterator[torch.Tensor]:
    """Up to ``n`` images of ``dataset``'s clean split, in a fixed shuffled order (seed
    :data:`SOURCE_SAMPLE_SEED`, whatever the run's seed), as float [0, 1] NCHW batches of
    ``batch_size``: the source samples of :attr:`MethodContext.source_images`."""
    source = dataset.open("clean", None, root).source
    order = np.random.default_rng(SOURCE_SAMPLE_SEED).permutation(len(source))[: max(0, int(n))]
    for start in range(0, len(order), max(1, int(batch_size))):
        images, _ = source.get_batch(order[start : start + batch_size])
        yield images
