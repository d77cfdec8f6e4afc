"""δ̄ / δ̄_standard per method under both profiles (``default`` and ``paper``), through the tracer.

Each method is traced on the demo data (committed demo models) for ``--batches`` adapt events
of one corruption, one trace at a time, with ``standard`` traced right before and after each
method's pair of traces (the ratio's baseline is their mean), so that the machine's drifting
speed biases the ratios as little as possible. Prints a Markdown table naming the machine; the Tempora paper's
Tables 2 and 27 give the same ratio for ResNet-50 and ViT-B/16 on a GPU.

    python bench/bench_method_profiles.py --models demo-resnet demo-resnet-gn --batches 20
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402

from tempora_trace.config import TraceConfig  # noqa: E402
from tempora_trace.methods import get_method, methods_for_model  # noqa: E402
from tempora_trace.runner import trace_run  # noqa: E402


def mean_delta(path: Path) -> float:
    d = pq.read_table(path).to_pydict()
    vals = [x for x, ph in zip(d["delta_ms"], d["phase"]) if ph == "adapt"]
    return sum(vals) / len(vals)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["demo-resnet", "demo-resnet-gn"])
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--domain", default="gaussian_noise")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--methods", nargs="+", default=None, help="only these methods (default: every method that fits each model)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), platform.processor())
    print(
        f"Machine: {cpu}, {args.threads} thread(s); torch {torch.__version__}; {args.batches} adapt events of "
        f"{args.batch_size} on demo {args.domain} per trace, after the tracer's warm-up.\n"
    )
    print("| model | method | δ̄ standard (ms) | δ̄ default (ms) | δ̄ paper (ms) | ratio default | ratio paper |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:

            def trace(method: str, profile: str, model: str = model) -> float:
                cfg = TraceConfig(
                    method=method,
                    dataset="demo",
                    model=model,
                    domains=[args.domain],
                    max_batches=args.batches,
                    batch_size=args.batch_size,
                    out=str(Path(tmp) / model / profile),
                    quiet=True,
                    frozen_sample=1,
                    method_params={"profile": profile},
                    force=True,
                )
                return mean_delta(trace_run(cfg))

            for name in methods_for_model(model):
                if name == "standard" or (args.methods is not None and name not in args.methods):
                    continue
                # standard right before and after each pair: the ratio is paired in time, so a
                # machine whose speed drifts (shared CPUs do) biases it far less
                before = trace("standard", "default")
                d, p = trace(name, "default"), trace(name, "paper")
                base = (before + trace("standard", "default")) / 2
                same = not any(dep.switched_by_paper_profile for dep in get_method(name).departures)
                print(
                    f"| {model} | {name} | {base:.1f} | {d:.1f} | {p:.1f}{' (same code path)' if same else ''} | "
                    f"{d / base:.2f} | {p / base:.2f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
