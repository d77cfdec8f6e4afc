"""Plugin methods benchmark (``make bench``): does a method from outside the package cost
anything a built-in does not?

1. ``tempora-trace --help`` with ten plugin distributions installed against none (target:
   at most 50 ms slower). The plugins are ten distributions in a temporary folder on
   PYTHONPATH (a ``*.dist-info`` folder each, with ``METADATA`` and an ``entry_points.txt``
   declaring one ``tempora.methods`` entry point, and the module it names), which is what an
   installed distribution is to ``importlib.metadata``. Fresh processes, interleaved, median.
2. Entry-point discovery: the time to list the ``tempora.methods`` entry points (what
   ``tempora-trace list`` and an unknown ``--method`` name pay once per process), in a fresh
   process without and with the ten plugins, and ``tempora-trace list`` end to end.
3. Per-event overhead of a plugin against the same class built in. ``tent``'s module source
   is copied into a file outside the package (relative imports made absolute, the class
   renamed ``tent-plugin``, no ``register``) and loaded as ``PATH.py:Tent``: the same code in
   another module. (a) paired events: ``timed_event`` on the demo model, built-in and plugin
   alternating batch by batch in one process; (b) whole traces on the demo data, interleaved.

On a shared machine every figure is an upper bound: other processes only ever add time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from tempora_trace.config import TraceConfig  # noqa: E402
from tempora_trace.methods import MethodContext, get_method  # noqa: E402
from tempora_trace.methods.testing import demo_model  # noqa: E402
from tempora_trace.runner import trace_run  # noqa: E402
from tempora_trace.timing import DeviceClock, timed_event  # noqa: E402

PLUGINS = 10
HELP_TARGET_MS = 50.0


def write_plugins(site: Path, count: int = PLUGINS) -> None:
    """``count`` tiny plugin distributions, each one method class in its own module."""
    for i in range(count):
        dist = f"tempora-bench-plugin-{i}"
        info = site / f"tempora_bench_plugin_{i}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n", encoding="utf-8")
        (info / "entry_points.txt").write_text(f"[tempora.methods]\nbench-plugin-{i} = tempora_bench_plugin_{i}:Method\n", encoding="utf-8")
        (site / f"tempora_bench_plugin_{i}.py").write_text(
            "from tempora_trace.methods import TTAMethod\n\n\n"
            f"class Method(TTAMethod):\n    name = 'bench-plugin-{i}'\n    family = 'baseline'\n\n"
            "    def predict(self, x):\n        return self.model(x)\n",
            encoding="utf-8",
        )


def timed_process(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.strip()[-500:]}")
    return elapsed * 1000.0


def interleaved(argv: list[str], envs: dict[str, dict[str, str]], repeats: int) -> dict[str, list[float]]:
    """Fresh-process wall times of ``argv`` under each environment, alternating A B B A … so
    a drift in the machine's load falls on both alike."""
    times: dict[str, list[float]] = {k: [] for k in envs}
    for env in envs.values():  # one untimed run each: the file cache is warm for both
        timed_process(argv, env)
    keys = list(envs)
    for r in range(repeats):
        for k in keys if r % 2 == 0 else reversed(keys):
            times[k].append(timed_process(argv, envs[k]))
    return times


HELP_IN_PROCESS = (
    "import contextlib, io, time; t0 = time.perf_counter(); from tempora_trace.cli import main; "
    "out = io.StringIO(); ctx = contextlib.redirect_stdout(out); ctx.__enter__(); main(['--help']); ctx.__exit__(None, None, None); "
    "print((time.perf_counter() - t0) * 1000)"
)


def help_in_process(envs: dict[str, dict[str, str]], repeats: int) -> dict[str, list[float]]:
    """The time from importing the command line to its printed help, measured inside fresh
    processes (the interpreter's own start-up, which plugins cannot change, left out)."""
    times: dict[str, list[float]] = {k: [] for k in envs}
    keys = list(envs)
    for r in range(repeats):
        for k in keys if r % 2 == 0 else reversed(keys):
            out = subprocess.run([sys.executable, "-c", HELP_IN_PROCESS], capture_output=True, text=True, env=envs[k], check=True)
            times[k].append(float(out.stdout.strip().splitlines()[-1]))
    return times


DISCOVER = (
    "import time; from importlib.metadata import entry_points; t0 = time.perf_counter(); "
    "eps = entry_points(group='tempora.methods'); print(len(eps), (time.perf_counter() - t0) * 1000)"
)


LOOKUPS = """
import importlib, importlib.machinery, importlib.metadata as md, importlib.util, json, statistics, sys, time
site, repeats = sys.argv[1], int(sys.argv[2])
import tempora_trace.cli  # what --help imports: its top-level modules are looked up again below
names = sorted({m.split(".")[0] for m in sys.modules if not m.startswith("_")} - set(sys.builtin_module_names))
def once(with_site):
    if with_site:
        sys.path.insert(0, site)
    try:
        md.FastPath.__new__.cache_clear()
        importlib.invalidate_caches()
        sys.path_importer_cache.clear()
        t0 = time.perf_counter()
        for n in names:
            importlib.machinery.PathFinder.find_spec(n, sys.path)
        return (time.perf_counter() - t0) * 1000
    finally:
        if with_site:
            sys.path.remove(site)
for _ in range(5):
    once(False), once(True)
a, b = zip(*[(once(False), once(True)) for _ in range(repeats)])
print(json.dumps([len(names), statistics.median(a), statistics.median(b)]))
"""


def lookup_ms(site: Path, repeats: int = 200) -> tuple[int, float, float]:
    """What ten plugins on the path can add to ``--help`` at all: the path lookup of every
    top-level module ``--help`` imports (it reads no package metadata), with every import
    cache cleared, with and without the plugins' folder first on the path (medians of
    ``repeats`` alternating runs in one process: immune to start-up noise)."""
    out = subprocess.run([sys.executable, "-c", LOOKUPS, str(site), str(repeats)], capture_output=True, text=True, check=True)
    n, a, b = json.loads(out.stdout.strip().splitlines()[-1])
    return int(n), float(a), float(b)


def discovery_ms(env: dict[str, str], repeats: int) -> tuple[int, float]:
    """Entry points found and the median time to list them (importlib.metadata already
    imported: the tracer imports it anyway), each in a fresh process."""
    found, times = 0, []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", DISCOVER], capture_output=True, text=True, env=env, check=True).stdout.split()
        found, ms = int(out[0]), float(out[1])
        times.append(ms)
    return found, statistics.median(times)


def plugin_copy_of_tent(folder: Path) -> Path:
    """tent.py as a file outside the package: absolute imports, no ``register``, new name."""
    source = (ROOT / "src" / "tempora_trace" / "methods" / "tent.py").read_text(encoding="utf-8")
    source = re.sub(r"^from \. import register\n", "", source, flags=re.M)
    source = re.sub(r"^from \.(\w+) import", r"from tempora_trace.methods.\1 import", source, flags=re.M)
    source = re.sub(r"^@register\n", "", source, flags=re.M)
    source = source.replace('name = "tent"', 'name = "tent-plugin"')
    path = folder / "tent_plugin.py"
    path.write_text(source, encoding="utf-8")
    return path


def paired_events(plugin_file: Path, batches: int, batch_size: int, device: str) -> dict[str, float]:
    """Built-in and plugin ``tent`` alternating event by event on the same batches (random
    images: the time of tent's events does not depend on their content)."""
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    xs = [torch.rand(batch_size, 3, 32, 32, generator=gen).to(device) for _ in range(8)]
    context = MethodContext(
        num_classes=10, dataset_family="cifar", batch_size=batch_size, device=device, model_name="demo-resnet", norm_kind="bn"
    )
    methods = {
        "built-in": get_method("tent")(demo_model("bn", device), context),
        "plugin": get_method(f"{plugin_file}:Tent")(demo_model("bn", device), context),
    }
    assert type(methods["plugin"]).__module__.startswith("tempora_user_code_")
    clock = DeviceClock(torch.device(device))
    deltas: dict[str, list[float]] = {k: [] for k in methods}
    for m in methods.values():  # warm-up
        for x in xs[:3]:
            timed_event(m, x, clock)
    for i in range(batches):
        x = xs[i % len(xs)]
        order = list(methods) if i % 2 == 0 else list(reversed(methods))
        for k in order:
            ev = timed_event(methods[k], x, clock)
            deltas[k].append(ev.e_ms + ev.l_ms)
    diffs = [p - b for p, b in zip(deltas["plugin"], deltas["built-in"])]
    return {
        "built-in": statistics.median(deltas["built-in"]),
        "plugin": statistics.median(deltas["plugin"]),
        "diff": statistics.median(diffs),
        "diff_iqr": float(statistics.quantiles(diffs, n=4)[2] - statistics.quantiles(diffs, n=4)[0]),
    }


def calls_per_event(plugin_file: Path, batch_size: int = 16) -> dict[str, int]:
    """Python and C function calls inside one timed event (``sys.setprofile``), built-in
    against plugin: a deterministic count, where timings on a loaded machine are not."""
    x = torch.rand(batch_size, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    context = MethodContext(num_classes=10, dataset_family="cifar", batch_size=batch_size, model_name="demo-resnet", norm_kind="bn")
    clock = DeviceClock(torch.device("cpu"))
    counts = {}
    for label, spec in (("built-in", "tent"), ("plugin", f"{plugin_file}:Tent")):
        method = get_method(spec)(demo_model("bn"), context)
        timed_event(method, x, clock)  # lazy initialisation out of the way
        n = 0

        def count(frame, event, arg):  # noqa: ANN001
            nonlocal n
            if event in ("call", "c_call"):
                n += 1

        sys.setprofile(count)
        try:
            timed_event(method, x, clock)
        finally:
            sys.setprofile(None)
        counts[label] = n
    return counts


def whole_traces(plugin_file: Path, out: Path, repeats: int, max_batches: int) -> dict[str, list[float]]:
    medians: dict[str, list[float]] = {"built-in": [], "plugin": []}
    for r in range(repeats):
        for label, method in (("built-in", "tent"), ("plugin", f"{plugin_file}:Tent"))[:: 1 if r % 2 == 0 else -1]:
            cfg = TraceConfig(
                method=method,
                dataset="demo",
                domains=["gaussian_noise", "fog"],
                max_batches=max_batches,
                batch_size=64,
                threads=1,
                out=str(out / f"{label}-{r}"),
                quiet=True,
                default_checkpoints=False,
            )
            path = trace_run(cfg)
            d = pq.read_table(path).to_pydict()
            medians[label].append(statistics.median(x for x, p in zip(d["delta_ms"], d["phase"]) if p == "adapt"))
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="fresh processes per setting (--help, list)")
    parser.add_argument("--events", type=int, default=400, help="paired events per method")
    parser.add_argument("--trace-repeats", type=int, default=4, help="whole traces per method")
    parser.add_argument("--max-batches", type=int, default=30, help="batches per domain in a whole trace")
    parser.add_argument("--list-repeats", type=int, default=5, help="fresh `tempora-trace list` processes per setting")
    parser.add_argument("--only-help", action="store_true", help="measure 1 and 2 only")
    parser.add_argument("--skip-help", action="store_true", help="measure 3 only")
    parser.add_argument("--devices", default=None, help="devices of the paired events [default: cpu, and cuda when present]")
    args = parser.parse_args()

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"machine: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        write_plugins(site)
        base = dict(os.environ)
        with_plugins = os.pathsep.join(p for p in (str(site), base.get("PYTHONPATH", "")) if p)
        envs = {"none": base, f"{PLUGINS} plugins": {**base, "PYTHONPATH": with_plugins}}
        cli = [sys.executable, "-m", "tempora_trace.cli"]

        if not args.skip_help:
            helps = interleaved([*cli, "--help"], envs, args.repeats)
            (h0, h1), (m0, m1) = ((statistics.median(v) for v in helps.values()), (min(v) for v in helps.values()))
            print(
                f"1. tempora-trace --help, fresh process, {args.repeats} each: median none {h0:.0f} ms, {PLUGINS} plugins {h1:.0f} ms "
                f"({h1 - h0:+.0f} ms); fastest {m0:.0f} / {m1:.0f} ms ({m1 - m0:+.0f} ms) (target ≤ +{HELP_TARGET_MS:.0f} ms)"
            )
            inside = help_in_process(envs, args.repeats)
            (i0, i1), (n0, n1) = ((statistics.median(v) for v in inside.values()), (min(v) for v in inside.values()))
            print(
                f"1. import + --help inside the process: median none {i0:.1f} ms, {PLUGINS} plugins {i1:.1f} ms ({i1 - i0:+.1f} ms); "
                f"fastest {n0:.1f} / {n1:.1f} ms ({n1 - n0:+.1f} ms)"
            )

            n, a, b = lookup_ms(site)
            print(
                f"1. the work ten plugins add to --help ({n} module path lookups, caches cleared): none {a:.2f} ms, {PLUGINS} plugins {b:.2f} ms ({b - a:+.2f} ms)"
            )
            for label, env in envs.items():
                found, ms = discovery_ms(env, args.repeats)
                print(f"2. entry-point discovery ({label}): {found} entry points in {ms:.1f} ms (median of {args.repeats} fresh processes)")
            if args.list_repeats:
                lists = interleaved([*cli, "list"], envs, args.list_repeats)
                l0, l1 = (statistics.median(v) for v in lists.values())
                print(f"2. tempora-trace list end to end: none {l0:.0f} ms, {PLUGINS} plugins {l1:.0f} ms ({l1 - l0:+.0f} ms)")
        if args.only_help:
            return
        plugin_file = plugin_copy_of_tent(Path(tmp))
        devices = args.devices.split(",") if args.devices else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        for device in devices:
            paired = paired_events(plugin_file, args.events, 64, device)
            name = torch.cuda.get_device_name() if device.startswith("cuda") else "1 CPU thread"
            print(
                f"3a. paired tent events on demo-resnet ({device}: {name}, batch 64, {args.events} each): built-in "
                f"{paired['built-in']:.3f} ms, plugin {paired['plugin']:.3f} ms; median paired difference "
                f"{paired['diff']:+.3f} ms (IQR {paired['diff_iqr']:.3f} ms)"
            )
        calls = calls_per_event(plugin_file)
        print(f"3c. function calls inside one tent event (sys.setprofile): built-in {calls['built-in']}, plugin {calls['plugin']}")
        try:
            import imagecorruptions  # noqa: F401  (optional stack, probed: the demo data's corruptions)
        except ImportError:
            if args.trace_repeats:
                print("3b. skipped: the demo data needs the trace extra (imagecorruptions)")
            return
        if not args.trace_repeats:
            return
        os.environ.setdefault("TEMPORA_HOME", str(Path(tmp) / "home"))
        traces = whole_traces(plugin_file, Path(tmp) / "traces", args.trace_repeats, args.max_batches)
        b, p = traces["built-in"], traces["plugin"]
        print(
            f"3b. whole demo traces (2 domains × {args.max_batches} batches of 64, {args.trace_repeats} each, interleaved): "
            f"median δ built-in {statistics.median(b):.3f} ms (runs {min(b):.3f}–{max(b):.3f}), plugin {statistics.median(p):.3f} ms "
            f"(runs {min(p):.3f}–{max(p):.3f})"
        )


if __name__ == "__main__":
    main()
