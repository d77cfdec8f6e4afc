"""The GPU figures of the documentation, taken in one process so that a short lease on a GPU
machine goes to the events rather than to start-ups.

    python tools/gpu_figures.py costs    --out DIR    # the field's methods on ResNet-50 and ViT-B/16
    python tools/gpu_figures.py profiles --out DIR    # full traces + profiles for `make predict-validate`

``costs`` traces every method of ``--methods`` that fits each model on a synthetic 224-px JPEG
``gaussian_noise`` folder (``tempora-trace synthesize``; random weights, so timing only), with
``standard`` traced first and again last, and writes ``DIR/costs.md`` row by row as each trace
ends: δ̄, median δ, ē, the ratio to the mean of the model's ``standard`` traces so far (the
first one, for every method) and the peak memory of an event.
No variability pass and no frozen checkpoints: the figure is the main pass's events.

``profiles`` writes ``DIR/traces/<n>thr/<model>/<method>.parquet`` and its profile under
``DIR/profiles/…`` (each method's profile right after its full trace, as `make predict-validate`
takes them) and the wall time of each into ``DIR/wall.tsv``, in `make predict-validate`'s layout
and with its default options, so a CPU's set and a GPU's set predict each other with
``tempora-sim predict`` and ``validate-prediction``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402

import tempora_trace as tt  # noqa: E402
from tempora_trace.data.synthetic import synthesize  # noqa: E402
from tempora_trace.methods import FIELD_METHODS, methods_for_model  # noqa: E402


def machine_line(device: str) -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), platform.processor())
    gpu = torch.cuda.get_device_name(0) if device.startswith("cuda") and torch.cuda.is_available() else "none"
    return f"{gpu}; host {cpu}; torch {torch.__version__}; Python {platform.python_version()}"


def adapt_rows(path: Path) -> dict[str, list]:
    d = pq.read_table(path).to_pydict()
    keep = [i for i, ph in enumerate(d["phase"]) if ph == "adapt"]
    return {k: [d[k][i] for i in keep] for k in ("delta_ms", "e_ms", "peak_mem_bytes")}


def costs(args: argparse.Namespace) -> int:
    data = Path(args.out) / "synthetic"
    synthesize(data, ["gaussian_noise"], args.batches * args.batch_size, workers=args.workers, quiet=True)
    # EATA estimates its Fisher regulariser on clean source images (`val/<wnid>/*.JPEG`) when it
    # is built, outside every timed event: the synthetic images stand in for them
    if not (data / "val").exists():
        (data / "val").symlink_to(data / "gaussian_noise" / "5", target_is_directory=True)
    lines = [
        f"Machine: {machine_line(args.device)}. Each trace: up to {args.batches} adapt events of "
        f"{args.batch_size} synthetic 224-px `gaussian_noise` JPEGs, random weights, default profile, "
        "after the tracer's warm-up; no variability pass, no frozen checkpoints.",
        "",
        "| model | method | events | δ̄ (ms) | median δ (ms) | ē (ms) | δ̄ / δ̄ standard | peak MiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    out = Path(args.out) / "costs.md"
    out.write_text("\n".join(lines) + "\n")
    fits = {model: methods_for_model(model) for model in args.models}
    #: per model, δ̄ of each `standard` trace taken so far (the ratios' baseline)
    standard: dict[str, list[float]] = {model: [] for model in args.models}
    # method by method across the models, the cheap ones first, `standard` first and last: a
    # short lease still gets every model's cheap methods; each row is written as it is measured
    order = ["standard", *[m for m in args.methods if m != "standard"], "standard (after)"]
    for method in order:
        for model in args.models:
            name = method.split()[0]
            if name not in fits[model]:
                continue
            try:
                r = adapt_rows(
                    tt.trace(
                        method=name,
                        dataset="imagenet-c",
                        data_root=str(data),
                        model=model,
                        weights="random",
                        device=args.device,
                        domains=["gaussian_noise"],
                        max_batches=args.memo_batches if name == "memo" else args.batches,
                        batch_size=args.batch_size,
                        warmup_batches=args.memo_warmup_batches if name == "memo" else args.warmup_batches,
                        out=str(Path(args.out) / "costs" / model),
                        name=method.replace(" (after)", "-after"),
                        timing_sample=0,
                        default_checkpoints=False,
                        force=True,
                    )
                )
            except Exception as exc:  # one method's failure must not cost the others' figures
                print(f"{model} {method}: {type(exc).__name__}: {exc}", flush=True)
                continue
            d = r["delta_ms"]
            if name == "standard":
                standard[model].append(statistics.fmean(d))
            base = statistics.fmean(standard[model])
            peak = max((b or 0) for b in r["peak_mem_bytes"]) / 2**20
            line = (
                f"| {model} | {method} | {len(d)} | {statistics.fmean(d):.2f} | {statistics.median(d):.2f} | "
                f"{statistics.fmean(r['e_ms']):.2f} | {statistics.fmean(d) / base:.2f} | {peak:.0f} |"
            )
            with out.open("a") as f:
                f.write(line + "\n")
            print(line, flush=True)
    return 0


def profiles(args: argparse.Namespace) -> int:
    out = Path(args.out)
    for model in args.models:
        methods = [m for m in methods_for_model(model) if m not in FIELD_METHODS] if not args.methods else args.methods
        for method in methods:
            common = dict(
                method=method,
                dataset="demo",
                model=model,
                device=args.device,
                threads=args.threads,
                domains=args.domains,
                name=method,
                force=True,
            )
            for kind in ("trace", "profile"):
                folder = out / f"{kind}s" / f"{args.threads}thr" / model
                start = time.time()
                try:
                    if kind == "trace":
                        tt.trace(out=str(folder), frozen_sample=8, **common)
                    else:
                        tt.profile(out=str(folder), **common)
                except Exception as exc:  # one method's failure must not cost the others' pairs
                    print(f"{kind} {model} {method}: {type(exc).__name__}: {exc}", flush=True)
                    break
                with (out / "wall.tsv").open("a") as f:
                    f.write(f"{kind} {args.threads}thr/{model}/{method} {start:.3f} {time.time():.3f}\n")
                print(f"{kind} {model} {method}: {time.time() - start:.1f} s", flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("step", choices=["costs", "profiles"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", nargs="+", default=None)
    ap.add_argument("--methods", nargs="+", default=None)
    ap.add_argument("--batches", type=int, default=20, help="costs: adapt events per trace")
    ap.add_argument("--memo-batches", type=int, default=5, help="costs: adapt events of MEMO (64 views per ImageNet image)")
    ap.add_argument("--warmup-batches", type=int, default=5, help="costs: the tracer's untimed warm-up batches")
    ap.add_argument(
        "--memo-warmup-batches", type=int, default=1, help="costs: MEMO's warm-up batches (one shape; each batch takes tens of seconds)"
    )
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=None, help="costs: JPEG-encoding processes")
    ap.add_argument("--threads", type=int, default=1, help="profiles: torch threads")
    ap.add_argument("--domains", nargs="+", default=["gaussian_noise", "fog", "contrast"], help="profiles: corruptions")
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.step == "costs":
        args.models = args.models or ["resnet50", "vit_base_patch16_224"]
        args.methods = args.methods or ["standard", "t3a", "eata", "roid", "rotta", "cotta", "memo"]
        return costs(args)
    args.models = args.models or ["demo-resnet"]
    return profiles(args)


if __name__ == "__main__":
    raise SystemExit(main())
