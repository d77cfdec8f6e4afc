"""Tracing campaigns: a whole study from one TOML file, on this machine or a Ray cluster.

A campaign names the trace groups of a study (dataset, model, weights, device type, batch
size, severities, seeds, streams) × methods × domains, and where each kind of machine keeps
its data. :func:`load_campaign` expands it into one :class:`TraceTask` per trace file and
checks everything a run would trip over later (unknown method, model or dataset, a missing
data root) up front, as one-line errors.

Every trace runs as its own ``tempora-trace run`` process (a profile group's tasks as
``tempora-trace profile`` processes, under the campaign's ``profiles_out``), so it starts from a
clean interpreter and nothing of the scheduler shares its cores or its GIL while it is timed.
Two engines place those processes:

* ``local``: one trace at a time per device. On a machine with several GPUs, one dispatcher
  per GPU, each launching its traces with ``CUDA_VISIBLE_DEVICES`` set to its own GPU, so no
  two traces ever share one. CPU traces run one at a time.
* ``ray``: every trace is a Ray task that asks for one whole GPU (or the machine kind's CPU
  cores, and its accelerator type when the campaign names one), so Ray never co-locates two
  traces on one device. A task lost with its worker or node is retried; the retry resumes the
  trace after its last complete episode (``--resume``), which gives the same rows.

Both run each group's ``standard`` trace first (its λ sets budget checkpoints), skip traces
and profiles that are already complete, and report done / running / failed as they go.

The file, its tasks and its checks are :mod:`tempora_trace.campaign_file`; this module runs
them: one trace as one process, the two engines, the locks and the progress.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pyarrow.parquet as pq
import torch
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as Bar

from tempora_schema import PROFILE_AUTO_KEY, PROFILE_BATCHES_KEY, decode_metadata
from tempora_schema.errors import OutputLockedError, output_error
from tempora_schema.prediction import is_profile
from tempora_schema.vocabulary import BASELINE_METHOD
from tempora_toolkit.atomic_files import check_output_dir, output_lock, write_file

from . import options as trace_options
from .calibration import lambda_ms_of
from .campaign_file import ENGINES, Campaign, CampaignError, TraceTask, first_line, load_campaign
from .campaign_file import TRACE_OPTIONS as TRACE_OPTIONS  # importable from here, where the campaign runs
from .config import TraceConfig, path_part
from .errors import ConfigError, TraceError
from .timing import device_slug, resolve_device
from .writer import identity_differences


# --------------------------------------------------------------------------- one trace
@dataclass
class TaskResult:
    task: TraceTask
    status: str  # done | skipped | failed
    path: str | None = None
    seconds: float = 0.0
    message: str = ""
    data: bytes | None = None  # the trace file, when it travels back to the driver


def task_config(task: TraceTask, out_root: Path):
    """The resolved :class:`TraceConfig` the ``tempora-trace run`` (``profile``) process of ``task`` builds."""
    try:  # the options exactly as the `tempora-trace run` process will parse and map them
        cli_values = trace_options.parse_args(task.command, task.argv(out_root)[1:])
    except click.ClickException as exc:
        raise CampaignError(f"{task.label}: {exc.format_message()}") from None
    return TraceConfig(**trace_options.config_kwargs(task.command, cli_values)).resolved()


def trace_location(task: TraceTask, out_root: Path) -> Path:
    """Where ``tempora-trace run`` (``profile``) puts this task's file on the machine that runs
    it; ``out_root`` is the campaign's root for the task (:meth:`Campaign.root`)."""
    cfg = task_config(task, out_root)
    slug = device_slug(resolve_device(task.machine.device))
    return out_root / path_part(cfg.dataset_label()) / path_part(cfg.model_label()) / slug / f"{cfg.file_stem()}.parquet"


def other_identity(task: TraceTask, out_root: Path, path: Path | None = None) -> list[str] | None:
    """``None`` unless ``task``'s file holds a complete trace; then where its identity differs
    from the one this task asks for (method, data, model, batch size, seed, stream, severity,
    domains, batch limit, threads, frozen sample, the parameters the campaign sets), ``[]``
    when it is this task's trace. An unreadable file is no complete trace."""
    path = path or trace_location(task, out_root)
    if not path.is_file():
        return None
    try:
        meta = decode_metadata(pq.read_schema(path), path)
    except Exception:  # an unreadable file is re-traced (the tracer refuses to overwrite it: --force below)
        return None
    return task_differences(meta, task, task_config(task, out_root))


def task_differences(meta: dict, task: TraceTask, cfg: TraceConfig) -> list[str]:
    """Where a complete file's metadata differs from what ``task`` would write: a trace where
    a profile is asked for (or the reverse), the identity and parameters, and a profile's length."""
    if is_profile(meta) != task.is_profile:
        found, wanted = ("profile", "trace") if is_profile(meta) else ("trace", "profile")
        return [f"kind {found!r} ≠ {wanted!r}"]
    if not task.is_profile:
        return identity_differences(meta, cfg, params=True)
    differ = identity_differences(meta, dataclasses.replace(cfg, frozen_sample=0), params=True)  # a profile scores no frozen rows
    if task.profile_batches == trace_options.PROFILE_AUTO:  # the count follows the stream; the rule must be today's
        if meta.get(PROFILE_AUTO_KEY) != trace_options.profile_auto_rule():
            found = meta.get(PROFILE_AUTO_KEY) or meta.get(PROFILE_BATCHES_KEY)
            differ.append(f"{PROFILE_BATCHES_KEY} {found!r} ≠ {trace_options.PROFILE_AUTO!r} {trace_options.profile_auto_rule()!r}")
    elif meta.get(PROFILE_BATCHES_KEY) != task.profile_batches:
        differ.append(f"{PROFILE_BATCHES_KEY} {meta.get(PROFILE_BATCHES_KEY)!r} ≠ {task.profile_batches!r}")
    return differ


def _complete(path: Path) -> bool:
    if not path.is_file():
        return False
    try:
        decode_metadata(pq.read_schema(path), path)
        return True
    except Exception:  # an unreadable file is re-traced (the tracer refuses to overwrite it: --force below)
        return False


def run_trace_process(
    task: TraceTask, out_root: Path, lambda_ms: float | None = None, env: dict[str, str] | None = None, force: bool = False
) -> TaskResult:
    """Run one trace as a ``tempora-trace run`` process, or one profile as a ``tempora-trace
    profile`` process (resuming an interrupted one). A complete file is skipped only if it is of
    this task's identity; one of another identity fails the task in one line, or is traced
    again with ``force``."""
    t0 = time.perf_counter()
    path = trace_location(task, out_root)
    differ = other_identity(task, out_root, path)
    if differ == []:
        return TaskResult(task, "skipped", str(path))
    if differ and not force:
        return TaskResult(task, "failed", str(path), 0.0, _other_identity_line(path, differ))
    args = task.argv(out_root, lambda_ms) + ["--out", str(path.parent)]
    partial = path.with_suffix(".partial")
    if partial.exists() and not differ:
        args.append("--resume")
    elif path.exists() or partial.exists():
        args.append("--force")  # an unreadable leftover, or a trace of another identity the user asked to replace

    def launch(argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "tempora_trace.cli", *argv], capture_output=True, text=True, env={**os.environ, **(env or {})}
        )

    proc = launch(args)
    if proc.returncode != 0 and force and "--resume" in args and "options differ from the interrupted run" in proc.stderr:
        # an interrupted run of another identity: the user asked for traces of this one
        proc = launch([a if a != "--resume" else "--force" for a in args])
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        return TaskResult(task, "failed", str(path), seconds, lines[-1] if lines else f"exit status {proc.returncode}")
    return TaskResult(task, "done", str(path), seconds)


def _other_identity_line(path: Path, differ: list[str]) -> str:
    return (
        f"{path} is a complete file of another identity than this campaign asks for ({'; '.join(differ)}); "
        "pass --force to trace it again, or change the campaign's out"
    )


def group_lambda(path: str | Path) -> float:
    """λ of a group from its ``standard`` trace (the provision `tempora-sim` uses)."""
    return lambda_ms_of(Path(path))[0]


# --------------------------------------------------------------------------- engines
Launcher = Callable[[TraceTask, Path, "float | None", "dict[str, str]"], TaskResult]


def visible_gpus() -> list[int]:
    """Indices of the GPUs this machine shows (none without CUDA)."""
    try:
        return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    except Exception:
        return []


class Progress:
    """Counts of done / skipped / running / failed traces, drawn with rich when attached to a terminal."""

    def __init__(self, total: int, quiet: bool = False):
        self.total = total
        self.counts = {"done": 0, "skipped": 0, "failed": 0, "running": 0}
        self.lock = threading.Lock()
        self.quiet = quiet
        self._bar = None
        if not quiet and sys.stderr.isatty():
            self._bar = Bar(
                TextColumn("traces"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                transient=True,
            )
            self._bar.start()
            self._id = self._bar.add_task(self._text(), total=total)

    def _text(self) -> str:
        c = self.counts
        return f"{c['running']} running · {c['done']} done · {c['skipped']} skipped · {c['failed']} failed"

    def start(self, task: TraceTask) -> None:
        with self.lock:
            self.counts["running"] += 1
            self._draw()

    def finish(self, result: TaskResult) -> None:
        with self.lock:
            self.counts["running"] -= 1
            self.counts[result.status] += 1
            self._draw(advance=1)
            if not self.quiet and self._bar is None and result.status != "skipped":
                extra = f": {result.message}" if result.message else ""
                print(f"{result.status:>7}  {result.task.label}  ({result.seconds:.0f} s){extra}", file=sys.stderr, flush=True)

    def _draw(self, advance: int = 0) -> None:
        if self._bar is not None:
            self._bar.update(self._id, description=self._text(), advance=advance)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def _lambdas_needed(campaign: Campaign, results: list[TaskResult]) -> dict[tuple, float]:
    """λ per group from the finished standard traces (only groups with budget checkpoints)."""
    need = {t.group_key for t in campaign.tasks if t.budgets_ms}
    out = {}
    for r in results:
        if r.task.method == BASELINE_METHOD and r.task.group_key in need and r.status in ("done", "skipped") and r.path:
            out[r.task.group_key] = group_lambda(r.path)
    return out


def run_local(
    campaign: Campaign,
    launcher: Launcher | None = None,
    gpus: Sequence[int] | None = None,
    progress: Progress | None = None,
    force: bool = False,
) -> list[TaskResult]:
    """One trace at a time per device: a dispatcher per GPU, pinned with CUDA_VISIBLE_DEVICES.
    ``force``: traces of another identity under a task's name are traced again."""
    if launcher is None:
        launcher = functools.partial(run_trace_process, force=force)
    progress = progress or Progress(len(campaign.tasks), quiet=True)
    results: list[TaskResult] = []
    cuda = [t for t in campaign.tasks if t.machine.device == "cuda"]
    if gpus is None:
        gpus = visible_gpus()
    if cuda and not gpus:
        raise CampaignError(
            f"{campaign.path}: the campaign has CUDA traces but this machine shows no GPU (run it where the GPUs are, or with --engine ray)"
        )

    def run_phase(tasks: list[TraceTask], lambdas: dict) -> None:
        cpu_tasks = [t for t in tasks if t.machine.device != "cuda"]
        gpu_tasks = [t for t in tasks if t.machine.device == "cuda"]
        lock = threading.Lock()

        def one(task: TraceTask, env: dict[str, str]) -> None:
            progress.start(task)
            try:
                result = launcher(task, campaign.root(task), lambdas.get(task.group_key), env)
            except Exception as exc:  # a launcher that breaks fails its task, not the campaign
                result = TaskResult(task, "failed", message=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            progress.finish(result)
            with lock:
                results.append(result)

        def dispatcher(device: int) -> None:
            while True:
                with lock:
                    if not gpu_tasks:
                        return
                    task = gpu_tasks.pop(0)
                one(task, {"CUDA_VISIBLE_DEVICES": str(device)})

        threads = [threading.Thread(target=dispatcher, args=(d,), daemon=True) for d in gpus] if gpu_tasks else []
        for th in threads:
            th.start()
        for task in cpu_tasks:  # CPU traces one at a time (GPU traces leave the CPU mostly idle)
            one(task, {"CUDA_VISIBLE_DEVICES": ""})
        for th in threads:
            th.join()

    first, rest = campaign.ordered()
    run_phase(first, {})
    run_phase(rest, _lambdas_needed(campaign, results))
    return results


def _ray_task(task: TraceTask, out_root: str, lambda_ms: float | None, shared: bool, node_root: str, force: bool = False) -> TaskResult:
    """Body of one Ray task: the trace (or profile) as a process on whatever node Ray chose;
    ``out_root`` and ``node_root`` are the task's own roots (traces and profiles apart)."""
    root = Path(out_root) if shared else Path(node_root).expanduser()
    env = {}
    if task.machine.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    result = run_trace_process(task, root, lambda_ms, env, force)
    if result.status == "failed":
        raise TraceError(f"{task.label}: {result.message}")  # Ray retries it; the retry resumes
    if not shared and result.path:
        result.data = Path(result.path).read_bytes()
        result.path = str(Path(result.path).relative_to(root))
    return result


#: Seconds ``--address HOST:PORT`` may take to answer before the campaign gives up
#: (``$TEMPORA_RAY_CONNECT_TIMEOUT`` changes it).
RAY_CONNECT_TIMEOUT_S = 15.0


def _connect_timeout() -> float:
    try:
        value = float(os.environ.get("TEMPORA_RAY_CONNECT_TIMEOUT", RAY_CONNECT_TIMEOUT_S))
    except ValueError:
        return RAY_CONNECT_TIMEOUT_S
    return value if math.isfinite(value) and value > 0 else RAY_CONNECT_TIMEOUT_S


def check_ray_address(address: str | None, timeout: float | None = None) -> None:
    """A cluster address must answer within ``timeout`` seconds: Ray itself would wait forever
    for an unreachable one, printing its own messages. ``auto`` and no address are Ray's to
    resolve (no cluster there is an error Ray raises at once)."""
    if address is None or address == "auto" or address.startswith("local"):
        return
    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise CampaignError(f"--address {address}: expected auto or HOST:PORT (ray://HOST:PORT for Ray client)")
    timeout = _connect_timeout() if timeout is None else timeout
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except TimeoutError:
        raise CampaignError(f"--address {address}: no Ray cluster answered within {timeout:g} s; is it running and reachable?") from None
    except OSError as exc:
        reason = (exc.strerror or str(exc) or type(exc).__name__).lower()
        raise CampaignError(f"--address {address}: cannot reach a Ray cluster there ({reason}); is it running and reachable?") from None


def run_ray(
    campaign: Campaign,
    address: str | None = None,
    retries: int = 3,
    progress: Progress | None = None,
    ray_init: dict | None = None,
    force: bool = False,
) -> list[TaskResult]:
    """Every trace a Ray task holding one whole GPU (or its CPU cores); lost tasks are retried."""
    try:
        import ray  # optional (the cluster extra): loaded only for --engine ray
    except ModuleNotFoundError:
        raise CampaignError("--engine ray needs Ray: pip install 'tempora-tta[cluster]'") from None
    progress = progress or Progress(len(campaign.tasks), quiet=True)
    started_here = not ray.is_initialized()
    if started_here:
        check_ray_address(address)
        kwargs = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
        kwargs.update(ray_init or {})
        try:
            ray.init(address=address, **kwargs)
        except ConnectionError as exc:  # an OSError: not "cannot access output"
            raise CampaignError(f"--address {address}: {first_line(str(exc)) or 'cannot connect to the Ray cluster'}") from None
    try:
        resources = ray.cluster_resources()
        for t in campaign.tasks:
            if t.machine.device == "cuda" and resources.get("GPU", 0) < 1:
                raise CampaignError(f"{campaign.path}: machine kind {t.machine.kind!r} needs a GPU but no Ray node has one")
            if t.machine.accelerator and resources.get(f"accelerator_type:{t.machine.accelerator}", 0) <= 0:
                raise CampaignError(
                    f"{campaign.path}: no Ray node has accelerator type {t.machine.accelerator!r} (machine kind {t.machine.kind!r})"
                )
            if t.machine.device == "cpu" and resources.get("CPU", 0) < t.machine.cpus_per_trace:
                raise CampaignError(
                    f"{campaign.path}: machine kind {t.machine.kind!r} asks for "
                    f"{t.machine.cpus_per_trace} CPUs per trace; the cluster has {resources.get('CPU', 0):g}"
                )
        remote = ray.remote(_ray_task)
        # a node's own copies (shared_storage = false): traces and profiles in two trees, as on the driver
        node_roots = {False: f"~/.cache/tempora/campaigns/{campaign.name}", True: f"~/.cache/tempora/campaign-profiles/{campaign.name}"}
        results: list[TaskResult] = []

        def submit(task: TraceTask, lam: float | None):
            ray_options: dict[str, Any] = {"max_retries": retries, "retry_exceptions": True}
            if task.machine.device == "cuda":
                ray_options["num_gpus"] = 1
                ray_options["num_cpus"] = task.machine.cpus_per_trace
                if task.machine.accelerator:
                    ray_options["accelerator_type"] = task.machine.accelerator
            else:
                ray_options["num_cpus"] = task.machine.cpus_per_trace
            progress.start(task)
            return remote.options(**ray_options).remote(
                task, str(campaign.root(task)), lam, campaign.shared_storage, node_roots[task.is_profile], force
            )

        def collect(pending: dict) -> None:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                task = pending.pop(ready[0])
                try:
                    result = ray.get(ready[0])
                except Exception as exc:  # retries exhausted
                    text = str(exc).strip().splitlines()
                    result = TaskResult(task, "failed", message=text[-1] if text else type(exc).__name__)
                if result.data is not None:
                    target = campaign.root(task) / result.path
                    target.parent.mkdir(parents=True, exist_ok=True)
                    write_file(target, result.data, what="cannot write the trace returned by a Ray task")
                    result.path, result.data = str(target), None
                progress.finish(result)
                results.append(result)

        first, rest = campaign.ordered()
        collect({submit(t, None): t for t in first})
        lambdas = _lambdas_needed(campaign, results)
        collect({submit(t, lambdas.get(t.group_key)): t for t in rest})
        return results
    finally:
        if started_here:
            ray.shutdown()


def run_campaign(
    path: str | os.PathLike, engine: str = "local", address: str | None = None, retries: int = 3, quiet: bool = False, force: bool = False
) -> tuple[Campaign, list[TaskResult], float]:
    """Load and run a campaign; returns it, its results and the wall time (s).

    Before any trace starts: the out folder must be writable, each local machine kind's
    data_root must exist, no complete trace under a task's name may be of another identity
    (unless ``force``: it is traced again), and the campaign takes the locks it holds for its
    whole run (:func:`campaign_locks`), so a second campaign on the same out folder or devices
    is refused in one line instead of timing its traces beside this one's."""
    if engine not in ENGINES:
        raise CampaignError(f"--engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if engine != "ray" and address is not None:
        raise CampaignError("--address is for --engine ray")
    campaign = load_campaign(path)
    check_output_dir(campaign.out, f"{campaign.path}: [campaign] out")
    if campaign.profiles:
        check_output_dir(campaign.root(campaign.profiles[0]), f"{campaign.path}: [campaign] profiles_out")
    if engine == "local":
        check_data_roots(campaign)
    with campaign_locks(campaign, engine):
        if engine == "local" or campaign.shared_storage:
            check_existing(campaign, force)
        t0 = time.perf_counter()
        progress = Progress(len(campaign.tasks), quiet=quiet)
        try:
            if engine == "ray":
                results = run_ray(campaign, address, retries, progress, force=force)
            else:
                results = run_local(campaign, progress=progress, force=force)
        finally:
            progress.close()
    return campaign, results, time.perf_counter() - t0


def check_data_roots(campaign: Campaign) -> None:
    """On this machine (the local engine) every data_root a trace reads must be a folder."""
    for machine in {t.machine for t in campaign.tasks}:
        if machine.data_root and not Path(machine.data_root).expanduser().is_dir():
            raise CampaignError(f"{campaign.path}: [machines.{machine.kind}] data_root {machine.data_root}: no such folder on this machine")


def check_existing(campaign: Campaign, force: bool) -> None:
    """Refuse, before any work, a complete trace of another identity under a task's name: the
    campaign would count it as done (unless ``force``: it is traced again)."""
    if force:
        return
    for task in campaign.tasks:
        path = trace_location(task, campaign.root(task))
        differ = other_identity(task, campaign.root(task), path)
        if differ:
            raise CampaignError(_other_identity_line(path, differ))


#: The folder of the machine-wide device locks (``$TEMPORA_DEVICE_LOCKS`` moves it).
def device_lock_dir() -> Path:
    return Path(os.environ.get("TEMPORA_DEVICE_LOCKS") or Path(tempfile.gettempdir()) / "tempora-device-locks").expanduser()


def _devices(campaign: Campaign, engine: str) -> list[str]:
    """The devices of this machine a local campaign traces on: ``cpu`` and ``cuda<i>``."""
    if engine != "local":
        return []
    out = []
    if any(t.machine.device == "cpu" for t in campaign.tasks):
        out.append("cpu")
    if any(t.machine.device == "cuda" for t in campaign.tasks):
        out += [f"cuda{i}" for i in visible_gpus()]
    return out


@contextlib.contextmanager
def campaign_locks(campaign: Campaign, engine: str):
    """Hold, for the campaign's whole run, its out folder and (local engine) each device of this
    machine it traces on. Timings taken beside another trace are what the tracer promises never
    to record, so a second campaign asking for any of them is refused at once, naming the
    process that holds it; the locks go when the run ends (or its process dies)."""
    targets = [(campaign.out, f"out folder {campaign.out}")]
    if campaign.profiles:
        profiles_out = campaign.root(campaign.profiles[0])
        targets.append((profiles_out, f"profiles_out folder {profiles_out}"))
    folder = device_lock_dir()
    devices = _devices(campaign, engine)
    with contextlib.ExitStack() as stack:
        try:
            for target, _ in targets:
                target.parent.mkdir(parents=True, exist_ok=True)
            if devices:
                folder.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(OSError):
                    os.chmod(folder, 0o1777)  # every user's campaigns share the machine's devices
        except OSError as exc:
            raise output_error(exc, folder if devices else campaign.out.parent, "cannot lock") from None
        targets += [(folder / f"device-{d}", f"device {d} of this machine") for d in devices]
        for target, what in targets:
            try:
                stack.enter_context(output_lock(target, "campaign"))
            except OutputLockedError as exc:
                holder = re.search(r"written by (process \d+|another process)", str(exc))
                raise CampaignError(
                    f"{campaign.path}: another campaign ({holder.group(1) if holder else 'another process'}) holds the {what}; "
                    "wait for it to finish: traces timed side by side are not comparable"
                ) from None
        yield


def _where(campaign: Campaign) -> str:
    """Where the campaign's files land: its traces, and its profiles when it has any."""
    where = f"traces under {campaign.out}"
    if campaign.profiles:
        where += f", profiles under {campaign.root(campaign.profiles[0])}"
    return where


def summary_line(campaign: Campaign, results: list[TaskResult], seconds: float) -> str:
    counts = {s: sum(r.status == s for r in results) for s in ("done", "skipped", "failed")}
    profiles = sum(r.task.is_profile for r in results)
    size = f"{len(results)} traces" if not profiles else f"{len(results) - profiles} traces and {profiles} profiles"
    return (
        f"campaign {campaign.name}: {size} — {counts['done']} traced, {counts['skipped']} already "
        f"complete, {counts['failed']} failed — in {seconds:.0f} s; {_where(campaign)}"
    )


def dry_run_lines(path: str | os.PathLike) -> Iterator[str]:
    """What ``tempora-trace campaign --dry-run`` prints: each trace the campaign would run (a
    profile's label ends ``profile:N``, N its batches per episode), then one line naming the
    campaign, its size and its folders."""
    campaign = load_campaign(path)
    for task in campaign.tasks:
        yield task.label
    profiles = len(campaign.profiles)
    if not profiles:
        yield f"campaign {campaign.name}: {len(campaign.tasks)} traces under {campaign.out}"
    else:
        yield f"campaign {campaign.name}: {len(campaign.tasks) - profiles} traces and {profiles} profiles; {_where(campaign)}"


def check_results(results: list[TaskResult]) -> None:
    """ConfigError (the command's exit status 2) naming the first failed trace, if any failed."""
    failed = [r for r in results if r.status == "failed"]
    if failed:
        raise ConfigError(f"{len(failed)} trace(s) failed, e.g. {failed[0].task.label}: {failed[0].message}")
