"""What one adapted batch costs each method: operator count and time per event, on CPU or CUDA.

For every gradient-based method (and ``standard`` as the yardstick) on a model with random
weights, run ``--events`` predict + adapt events after ``--warmup`` ones and report

- ``ops/event``: aten operators recorded by ``torch.profiler`` per event, all nesting levels
  (each is a dispatch, and on a GPU roughly a kernel launch), and the five most frequent;
- ``ms/event``: median wall time of predict + adapt, measured without the profiler
  (synchronised on CUDA);
- ``sync/event``: calls that wait for the device (``aten::item``, ``aten::nonzero``,
  ``aten::is_nonzero``, ``aten::_local_scalar_dense``).

Weights are random: timing and op counts do not depend on them. The output names the machine.
``--src`` points at another checkout's ``src`` to compare two versions of the methods.

    python bench/bench_method_steps.py --models demo-resnet resnet50 --batch 16
"""

from __future__ import annotations

import argparse
import collections
import importlib
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torchvision.models as tvm
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[1]

SYNC_OPS = {"aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero"}
GRADIENT_METHODS = ["tent", "eta", "shot-im", "sar", "deyo", "cmf", "spa", "zerosiam"]


def build_model(name: str):
    torch.manual_seed(0)
    if name in ("demo-resnet", "demo-resnet-gn"):
        from tempora_trace.models.demo import build_demo_resnet  # lazy: from the --src tree the command line chooses

        return build_demo_resnet(norm="gn" if name.endswith("gn") else "bn", num_classes=10), 32, 10, "cifar"
    if name == "resnet50":
        return tvm.resnet50(weights=None), 224, 1000, "imagenet"
    if name == "resnet50-gn":
        import timm  # optional stack, for the timm models only

        return timm.create_model("resnet50_gn", pretrained=False), 224, 1000, "imagenet"
    if name == "vit":
        import timm  # optional stack, for the timm models only

        return timm.create_model("vit_base_patch16_224", pretrained=False), 224, 1000, "imagenet"
    raise SystemExit(f"unknown model {name}")


def norm_of(model) -> str:
    from tempora_trace.methods.base import norm_kind  # lazy: from the --src tree the command line chooses

    return norm_kind(model)


def run(method_name: str, model_name: str, batch: int, events: int, warmup: int, device: str, params: dict):
    from tempora_trace.methods import MethodContext, MethodError, get_method  # lazy: from the --src tree the command line chooses

    model, size, classes, family = build_model(model_name)
    model.to(device)
    norm = norm_of(model)
    ctx = MethodContext(num_classes=classes, dataset_family=family, batch_size=batch, device=device, model_name=model_name, norm_kind=norm)
    cls = get_method(method_name)
    if norm not in cls.compatible_norms:
        return None
    extra = dict(params)
    if method_name == "spa":
        extra.update(image_size=size, noise_patch=4 if size == 32 else 16)
    if method_name in ("eta", "sar", "deyo"):  # random weights: let every sample through the entropy filters
        extra.update({"e_margin": 1e9} if method_name in ("eta", "sar") else {"ent_threshold": 1e9, "plpd_threshold": -1.0})
    try:
        method = cls(model, ctx, **extra)
    except (MethodError, TypeError) as exc:
        return f"skipped ({exc})"
    gen = torch.Generator().manual_seed(0)
    xs = [torch.rand(batch, 3, size, size, generator=gen).to(device) for _ in range(4)]

    def event(i):
        method.predict(xs[i % len(xs)])
        method.adapt()
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    for i in range(warmup):
        event(i)
    times = []
    for i in range(events):
        t0 = time.perf_counter()
        event(i)
        times.append((time.perf_counter() - t0) * 1e3)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=activities) as prof:
        for i in range(events):
            event(i)
    counts = collections.Counter(e.name for e in prof.events() if e.name.startswith("aten::"))
    ops = sum(counts.values()) / events
    syncs = sum(v for k, v in counts.items() if k in SYNC_OPS) / events
    top = ", ".join(f"{k.removeprefix('aten::')} {v / events:.0f}" for k, v in counts.most_common(5))
    return {"ops": ops, "ms": statistics.median(times), "sync": syncs, "top": top}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["demo-resnet", "demo-resnet-gn"])
    ap.add_argument("--methods", nargs="+", default=["standard"] + GRADIENT_METHODS)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--events", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--profile", default="default", help="method profile (default|paper)")
    ap.add_argument("--src", default=str(ROOT / "src"), help="the src/ folder whose methods to measure")
    args = ap.parse_args()
    sys.path.insert(0, args.src)
    importlib.import_module("tempora_trace.methods")
    torch.set_num_threads(args.threads)
    cpu = (
        next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), platform.processor())
        if Path("/proc/cpuinfo").exists()
        else platform.processor()
    )
    print(
        f"# {cpu}; {args.threads} thread(s); torch {torch.__version__}; device {args.device}; batch {args.batch}; "
        f"{args.events} events after {args.warmup} warm-up; src {args.src}"
    )
    print(f"{'model':<15} {'method':<9} {'ops/event':>9} {'sync/event':>10} {'ms/event':>9}  most frequent ops")
    params = {} if args.profile == "default" else {"profile": args.profile}
    for model_name in args.models:
        for name in args.methods:
            res = run(
                name,
                model_name,
                args.batch,
                args.events,
                args.warmup,
                args.device,
                params if name != "standard" or args.profile == "default" else params,
            )
            if res is None:
                continue
            if isinstance(res, str):
                print(f"{model_name:<15} {name:<9} {res}")
                continue
            print(f"{model_name:<15} {name:<9} {res['ops']:>9.0f} {res['sync']:>10.1f} {res['ms']:>9.1f}  {res['top']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
