"""Everything one trace run needs, with the defaults that make a bare command work.

``TraceConfig.resolved()`` fills dataset-dependent defaults (model, domains, output folder)
and checks values, so the runner, the CLI and the resume check all see one canonical config.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tempora_schema.command import INT32_MAX, INT64_MAX

from .errors import ConfigError

DEFAULT_BATCH_SIZE = 64
DEFAULT_SEED = 2025
DEFAULT_SEVERITY = 5
DEFAULT_FROZEN_SAMPLE = 32
WARMUP_BATCHES = 5

#: Fields that change the rows a run writes: a resumed run must match them exactly.
_IDENTITY_EXCLUDE = {"resume", "force", "quiet", "workers", "out", "name"}


def _check_finite(value: Any, option: str) -> None:
    """NaN/∞ hyperparameters would collapse the model and write metadata strict JSON rejects."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ConfigError(f"{option}: {item} is not a finite number")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


@dataclass
class TraceConfig:
    method: str = "standard"
    method_params: dict[str, Any] = field(default_factory=dict)
    dataset: str = "demo"
    model: str | None = None
    weights: str | None = None
    data_root: str | None = None
    device: str = "cpu"
    #: output directory; default ``traces/<dataset>/<model>/<device-slug>/``.
    out: str | None = None
    #: file stem; default the method name plus suffixes for non-default settings.
    name: str | None = None
    domains: list[str] | None = None
    severity: int = DEFAULT_SEVERITY
    max_batches: int | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    seed: int = DEFAULT_SEED
    stream: str = "episodic"
    #: later batches scored per checkpoint; None = all of them (exact).
    frozen_sample: int | None = DEFAULT_FROZEN_SAMPLE
    default_checkpoints: bool = True
    checkpoints: list[int] = field(default_factory=list)
    budgets_ms: list[float] = field(default_factory=list)
    lambda_ms: float | None = None
    #: DataLoader worker processes; None = 0 on CPU (workers would steal the measured cores), min(8, cores) on CUDA.
    workers: int | None = None
    warmup_batches: int = WARMUP_BATCHES
    resume: bool = False
    force: bool = False
    quiet: bool = False

    def resolved(self) -> "TraceConfig":
        """A copy with defaults filled in and every value checked (ConfigError otherwise)."""
        from .data import get_dataset

        cfg = dataclasses.replace(self, method_params=dict(self.method_params), checkpoints=list(self.checkpoints), budgets_ms=list(self.budgets_ms))
        spec = get_dataset(cfg.dataset)
        if cfg.model is None:
            cfg.model = spec.default_model
        if cfg.domains is None or len(cfg.domains) == 0:
            cfg.domains = list(spec.default_domains)
        else:
            from .data import expand_domains

            cfg.domains = expand_domains(cfg.domains, spec.domains)
        if cfg.stream not in ("episodic", "continual"):
            raise ConfigError(f"--stream must be 'episodic' or 'continual', not '{cfg.stream}'")
        if not 1 <= cfg.batch_size <= INT32_MAX:
            raise ConfigError(f"--batch-size must be in 1..{INT32_MAX}, not {cfg.batch_size}")
        if not 0 <= cfg.seed <= INT64_MAX:
            raise ConfigError(f"--seed must be in 0..{INT64_MAX}, not {cfg.seed}")
        if spec.has_severity and not 1 <= cfg.severity <= 5:
            raise ConfigError(f"--severity must be 1..5, not {cfg.severity}")
        if cfg.max_batches is not None and not 1 <= cfg.max_batches <= INT32_MAX:
            raise ConfigError(f"--max-batches must be in 1..{INT32_MAX}, not {cfg.max_batches}")
        if cfg.frozen_sample is not None and cfg.frozen_sample < 1:
            raise ConfigError(f"--frozen-sample must be ≥ 1 or 'all', not {cfg.frozen_sample}")
        if any(not 0 <= m <= INT32_MAX for m in cfg.checkpoints):
            raise ConfigError(f"--checkpoints must be step counts in 0..{INT32_MAX}")
        _check_finite(cfg.method_params, "--param")
        if cfg.budgets_ms:
            if cfg.lambda_ms is None:
                raise ConfigError("--budgets-ms needs --lambda-ms (λ, e.g. from `tempora-trace calibrate`)")
            if not all(math.isfinite(b) for b in [*cfg.budgets_ms, cfg.lambda_ms]):
                raise ConfigError("--budgets-ms and --lambda-ms must be finite")
            if any(b < 0 for b in cfg.budgets_ms) or cfg.lambda_ms <= 0:
                raise ConfigError("--budgets-ms must be ≥ 0 and --lambda-ms > 0")
        if cfg.warmup_batches < 0:
            raise ConfigError("warm-up batches must be ≥ 0")
        if cfg.workers is not None and cfg.workers < 0:
            raise ConfigError("--workers must be ≥ 0")
        if cfg.name is not None and not re.fullmatch(r"[A-Za-z0-9._+-]+", cfg.name):
            raise ConfigError(f"--name '{cfg.name}' may only use letters, digits and . _ + -")
        cfg.checkpoints = sorted(set(cfg.checkpoints))
        cfg.budgets_ms = sorted(set(float(b) for b in cfg.budgets_ms))
        return cfg

    def file_stem(self) -> str:
        """``<method>`` plus ``-bs<B>``, ``-seed<S>``, ``-sev<k>``, ``-continual`` where they
        differ from the defaults, so variants never share a file (``--name`` overrides)."""
        if self.name:
            return self.name
        stem = self.method
        if self.batch_size != DEFAULT_BATCH_SIZE:
            stem += f"-bs{self.batch_size}"
        if self.seed != DEFAULT_SEED:
            stem += f"-seed{self.seed}"
        if self.severity != DEFAULT_SEVERITY:
            stem += f"-sev{self.severity}"
        if self.stream != "episodic":
            stem += f"-{self.stream}"
        return stem

    def output_dir(self, device_slug: str) -> Path:
        if self.out is not None:
            return Path(self.out).expanduser()
        return Path("traces") / self.dataset / str(self.model) / device_slug

    def identity(self) -> dict[str, Any]:
        """The JSON-ready fields that determine the rows (for the resume check)."""
        d = dataclasses.asdict(self)
        return {k: v for k, v in d.items() if k not in _IDENTITY_EXCLUDE}
