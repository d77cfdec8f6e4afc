"""``tempora-trace``: measure one TTA method once on this device and write a schema-v1 trace.

    tempora-trace --method tent --device cuda                 # demo data, demo model
    tempora-trace --method tent --dataset imagenet-c --data-root ~/data/ImageNet-C --device cuda
    tempora-trace calibrate --device cuda                     # trace `standard`, print λ
    tempora-trace live --method tent --rho 1,0.5 --queue 1   # play it against a real clock

Bad input is reported as one ``error: …`` line on stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from .config import DEFAULT_BATCH_SIZE, DEFAULT_FROZEN_SAMPLE, DEFAULT_SEED, DEFAULT_SEVERITY, TraceConfig
from .errors import ConfigError, TraceError
from .methods.base import MethodError

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad arguments as a single line (no usage dump)."""

    def error(self, message: str):  # type: ignore[override]
        raise ConfigError(message)


def _parse_value(text: str):
    """``--param`` values: JSON when it parses (numbers, true/false, lists), else a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _float_list(text: str) -> list[float]:
    try:
        return [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated milliseconds, got '{text}'") from None


def _int_list(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated step counts, got '{text}'") from None


def _frozen_sample(text: str) -> int | None:
    if text == "all":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'all', got '{text}'") from None


def _common_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="demo", help="demo | cifar10-c | cifar100-c | imagenet-c | imagenet-r | imagenet-a | imagenet-v2 (default demo)")
    p.add_argument("--model", default=None, help="default: the dataset's model (demo-resnet, cifar-resnet18, resnet50)")
    p.add_argument("--weights", default=None, help="weight file (state_dict); 'random' for an untrained model (timing only)")
    p.add_argument("--data-root", default=None, help="dataset folder (default $TEMPORA_DATA/<dataset folder>)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    p.add_argument("--out", default=None, help="output folder (default traces/<dataset>/<model>/<device>/)")
    p.add_argument("--name", default=None, help="trace file stem (default <method> plus -bs/-seed/-sev/-continual suffixes when non-default)")
    p.add_argument("--domains", nargs="+", default=None, help="corruptions or groups noise/blur/weather/digital/all, or clean (default all 15 corruptions)")
    p.add_argument("--severity", type=int, default=DEFAULT_SEVERITY, help=f"corruption severity 1..5 (default {DEFAULT_SEVERITY})")
    p.add_argument("--max-batches", type=int, default=None, help="at most this many batches per domain")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help=f"default {DEFAULT_BATCH_SIZE}")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"default {DEFAULT_SEED}")
    p.add_argument("--stream", choices=["episodic", "continual"], default="episodic", help="episodic: reset per domain (default); continual: never reset")
    p.add_argument("--workers", type=int, default=None, help="loader threads (default 0 on CPU, min(8, cores) on CUDA)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run after its last complete episode")
    p.add_argument("--force", action="store_true", help="overwrite an existing trace or discard an interrupted run")
    p.add_argument("--quiet", action="store_true", help="no progress bars or episode summaries")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tempora-trace", description="Trace a TTA method once on this device (writes a schema-v1 Parquet trace).",
                epilog="`tempora-trace calibrate [options]` traces `standard` and prints λ = mean + 6σ of its per-batch latency.")
    p.add_argument("--method", default=None, help="TTA method name (see --list)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="override a method hyperparameter (repeatable)")
    _common_options(p)
    p.add_argument("--frozen-sample", type=_frozen_sample, default=DEFAULT_FROZEN_SAMPLE,
                   help=f"later batches scored per frozen checkpoint, or 'all' (default {DEFAULT_FROZEN_SAMPLE})")
    p.add_argument("--checkpoints", type=_int_list, default=[], help="extra exact checkpoints, e.g. 0,5,17")
    p.add_argument("--no-default-checkpoints", action="store_true", help="only --checkpoints and budget checkpoints")
    p.add_argument("--budgets-ms", type=_float_list, default=[], help="add the exact cut-off checkpoints of these budgets (needs --lambda-ms)")
    p.add_argument("--lambda-ms", type=float, default=None, help="λ for --budgets-ms (see `tempora-trace calibrate`)")
    p.add_argument("--list", action="store_true", help="list methods, models and datasets, then exit")
    p.add_argument("--methods-for", metavar="MODEL", default=None,
                   help="print the methods that run on MODEL (space-separated, for scripts), then exit")
    return p


def build_calibrate_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tempora-trace calibrate", description="Trace `standard` and print λ = mean + 6σ of its per-batch latency.")
    _common_options(p)
    return p


def build_live_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tempora-trace live",
                description="Play a method live against a real clock (discrete arrivals or an amortised budget) "
                            "and write a live-run Parquet file for `tempora-sim validate`.")
    p.add_argument("--method", default=None, help="TTA method name (see --list)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="override a method hyperparameter (repeatable)")
    _common_options(p)
    p.add_argument("--protocol", default="discrete", help="discrete, amortised, or discrete,amortised (default discrete)")
    p.add_argument("--rho", default=None, help="discrete: utilisations ρ = λ/γ, e.g. 1,0.5 or 100%%,50%%")
    p.add_argument("--gamma-ms", default=None, help="discrete: inter-arrival times γ in ms instead of --rho")
    p.add_argument("--queue", type=int, default=1, help="discrete: queue capacity b (0 = drop arrivals while busy; default 1)")
    p.add_argument("--B", dest="budgets", default=None, help="amortised: overhead budgets, ms or with ms/s suffix, e.g. 1s,4s")
    p.add_argument("--budget-rule", choices=["strict", "overshoot"], default="strict",
                   help="amortised cut-off: strict m = max{j: Σc ≤ B} (default) or overshoot (adapt while spent < B)")
    p.add_argument("--lambda-ms", default=None, help="λ in ms (default: mean + 6σ of the group's standard trace)")
    p.add_argument("--standard", default=None, help="standard trace file or folder to take λ from (default: the tracer's output folder of this group)")
    p.add_argument("--repeats", type=int, default=1, help="play every setting this many times (run-to-run spread; default 1)")
    p.add_argument("--spin-us", type=float, default=500.0, help="busy-wait the last µs before an arrival instead of sleeping (default 500)")
    p.add_argument("--stage-mb", type=float, default=1024.0, help="memory one staged chunk of an episode may take, MiB (default 1024)")
    return p


def _grid(text: str | None, parse, name: str) -> list[float] | None:
    """A comma list through the simulator's own grid parsers (same syntax as `tempora-sim sweep`)."""
    if text is None:
        return None
    from tempora_sim.errors import GridError

    try:
        return [parse(t, name) for t in text.split(",") if t.strip()]
    except GridError as exc:
        raise ConfigError(str(exc)) from None


def live(args: argparse.Namespace) -> int:
    """Play a method live and write the live-run file."""
    from tempora_sim.grids import parse_ratio, parse_time_ms

    from .live import LiveSettings, run_live

    if args.method is None:
        from .methods import available_methods

        raise ConfigError(f"--method is required; available: {', '.join(available_methods())}")
    lam = _grid(args.lambda_ms, parse_time_ms, "lambda-ms")
    settings = LiveSettings(
        protocols=args.protocol, rho=_grid(args.rho, parse_ratio, "rho"), gamma_ms=_grid(args.gamma_ms, parse_time_ms, "gamma-ms"),
        queue=args.queue, budgets_ms=_grid(args.budgets, parse_time_ms, "B") or [], budget_rule=args.budget_rule,
        lambda_ms=lam[0] if lam else None, standard=args.standard, repeats=args.repeats, spin_us=args.spin_us,
        stage_mb=args.stage_mb,
    )
    cfg = _config(args, args.method, method_params=_method_params(args.param))
    path = run_live(cfg, settings)
    print(f"wrote {path}")
    return 0


def _method_params(pairs: Sequence[str]) -> dict:
    params = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--param expects KEY=VALUE, got '{pair}'")
        key, value = pair.split("=", 1)
        params[key.strip()] = _parse_value(value)
    return params


def _config(args: argparse.Namespace, method: str, **extra) -> TraceConfig:
    if args.threads is not None:
        if args.threads < 1:
            raise ConfigError("--threads must be ≥ 1")
        import torch

        torch.set_num_threads(args.threads)
    return TraceConfig(
        method=method, dataset=args.dataset, model=args.model, weights=args.weights, data_root=args.data_root,
        device=args.device, out=args.out, name=args.name, domains=args.domains, severity=args.severity,
        max_batches=args.max_batches, batch_size=args.batch_size, seed=args.seed, stream=args.stream,
        workers=args.workers, resume=args.resume, force=args.force, quiet=args.quiet, **extra,
    )


def _list() -> None:
    from .data import DATASETS
    from .methods import available_methods
    from .models import available_models

    print("methods: " + ", ".join(available_methods()))
    print("models:  " + ", ".join(available_models()))
    print("datasets: " + ", ".join(f"{n} (default model {d.default_model})" for n, d in DATASETS.items()))


def methods_for(model: str) -> list[str]:
    """Methods whose normalisation needs the built-in ``model`` meets (no model is built)."""
    from .methods import available_methods, get_method
    from .models import MODEL_NORMS

    if model not in MODEL_NORMS:
        raise ConfigError(f"unknown model '{model}'; available: {', '.join(MODEL_NORMS)}")
    return [m for m in available_methods() if MODEL_NORMS[model] in get_method(m).compatible_norms]


def run_cli(argv: Sequence[str]) -> int:
    from .runner import trace_run

    argv = list(argv)
    if argv and argv[0] == "calibrate":
        return calibrate(build_calibrate_parser().parse_args(argv[1:]))
    if argv and argv[0] == "live":
        return live(build_live_parser().parse_args(argv[1:]))
    args = build_parser().parse_args(argv)
    if args.list:
        _list()
        return 0
    if args.methods_for is not None:
        print(" ".join(methods_for(args.methods_for)))
        return 0
    if args.method is None:
        from .methods import available_methods

        raise ConfigError(f"--method is required; available: {', '.join(available_methods())}")
    cfg = _config(
        args, args.method, method_params=_method_params(args.param), frozen_sample=args.frozen_sample,
        checkpoints=args.checkpoints, default_checkpoints=not args.no_default_checkpoints,
        budgets_ms=args.budgets_ms, lambda_ms=args.lambda_ms,
    )
    path = trace_run(cfg)
    print(f"wrote {path}")
    return 0


def lambda_ms_of(path: Path) -> tuple[float, float, float, int]:
    """λ = mean + 6σ (population σ) of the adapt-row δ of a `standard` trace: (λ, mean, σ, batches)."""
    import numpy as np
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["phase", "delta_ms"]).to_pydict()
    deltas = np.array([d for p, d in zip(table["phase"], table["delta_ms"]) if p == "adapt"], dtype=float)
    mean, std = float(deltas.mean()), float(deltas.std())
    return mean + 6 * std, mean, std, len(deltas)


def calibrate(args: argparse.Namespace) -> int:
    """Trace `standard` (or reuse its complete trace) and print λ."""
    from .runner import TraceRun

    # The same trace `--method standard` writes (default checkpoints included), so the
    # calibration run doubles as the baseline trace of the group.
    cfg = _config(args, "standard").resolved()
    from .timing import device_slug, resolve_device

    path = cfg.output_dir(device_slug(resolve_device(cfg.device))) / f"{cfg.file_stem()}.parquet"
    if path.exists() and not cfg.force and not cfg.resume:
        print(f"using existing {path} (pass --force to re-measure)")
    else:
        echo = (lambda s: None) if cfg.quiet else (lambda s: print(s, flush=True))
        path = TraceRun(cfg, echo).run()
        print(f"wrote {path}")
    lam, mean, std, count = lambda_ms_of(path)
    print(f"λ = {lam:.3f} ms  (mean {mean:.3f} ms + 6 × σ {std:.3f} ms over {count} batches of standard inference)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        return run_cli(argv)
    except (TraceError, MethodError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted: completed episodes are kept; rerun with --resume to continue", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
