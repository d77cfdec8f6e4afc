"""The conformance kit's checks that concern the device's clock rather than the method's arithmetic.

A host read (``.item()``, ``.cpu()``, a Python ``bool`` of a tensor …) or an explicit
synchronisation inside ``predict`` or ``adapt`` stalls the stream on a GPU; on a CPU it costs
nothing, so it is found by watching the calls, not the clock (:func:`check_no_sync`). A shape
first seen inside a timed event pays the device's one-time set-up there, so the tracer's
warm-up must run every shape a method uses (:func:`check_warm_up`).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import gc
import sys
import time
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

from .base import TTAMethod
from .testing_stream import _require, assert_outputs_equal, run_stream


# ---------------------------------------------------------------------- synchronisation
def _sync_functions() -> tuple[set[Any], dict[Any, str]]:
    """(C functions that read a clock or wait, Python code objects that synchronise → name)."""
    clocks = {
        getattr(time, n)
        for n in (
            "perf_counter",
            "perf_counter_ns",
            "time",
            "time_ns",
            "monotonic",
            "monotonic_ns",
            "process_time",
            "process_time_ns",
            "thread_time",
            "thread_time_ns",
            "sleep",
        )
        if hasattr(time, n)
    }
    clocks |= {datetime.datetime.now, datetime.datetime.utcnow, datetime.datetime.today}
    codes: dict[Any, str] = {}
    for owner, names in (
        ("cuda", ("synchronize",)),
        ("cpu", ("synchronize",)),
        ("mps", ("synchronize",)),
        ("xpu", ("synchronize",)),
        ("accelerator", ("synchronize",)),
    ):
        mod = getattr(torch, owner, None)
        for n in names:
            fn = getattr(mod, n, None) if mod is not None else None
            code = getattr(fn, "__code__", None)
            if code is not None:
                codes[code] = f"torch.{owner}.{n}"
    for cls_name in ("Stream", "Event"):
        cls = getattr(torch.cuda, cls_name, None)
        for n in ("synchronize", "wait", "elapsed_time", "query"):
            code = getattr(getattr(cls, n, None), "__code__", None)
            if code is not None:
                codes[code] = f"torch.cuda.{cls_name}.{n}"
    return clocks, codes


#: Tensor methods that copy a value to the host (an implicit synchronisation on a GPU).
HOST_READS = frozenset({"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero", "cpu", "numpy"})


class _HostReads(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if getattr(func, "__name__", "") in HOST_READS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def _qualified(fn: Any) -> str:
    owner = getattr(fn, "__self__", None)
    prefix = getattr(owner, "__name__", None) or getattr(fn, "__module__", None) or ""
    return f"{prefix}.{getattr(fn, '__name__', repr(fn))}".lstrip(".")


@contextlib.contextmanager
def _watch_calls(found: list[str]) -> Iterator[None]:
    clocks, codes = _sync_functions()
    previous = sys.getprofile()
    # A garbage collection may start inside the method and run other code's gc callbacks (a
    # test library timing its collections with a clock): not the method's calls. The first
    # callback marks a collection's start, the last its end, so every other callback runs inside.
    collecting = [False]

    def first(phase, info):  # noqa: ANN001, ARG001
        if phase == "start":
            collecting[0] = True

    def last(phase, info):  # noqa: ANN001, ARG001
        if phase == "stop":
            collecting[0] = False

    def profile(frame, event, arg):  # noqa: ANN001
        if collecting[0]:
            return
        if event == "c_call" and arg in clocks:
            found.append(_qualified(arg))
        elif event == "call" and frame.f_code in codes:
            found.append(codes[frame.f_code])

    gc.callbacks.insert(0, first)
    gc.callbacks.append(last)
    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(previous)
        gc.callbacks.remove(first)
        gc.callbacks.remove(last)


def check_no_sync(method: TTAMethod, xs: Sequence[torch.Tensor]) -> dict[str, float]:
    """Neither ``predict`` nor ``adapt`` synchronises the device or reads a clock (the tracer
    owns the clock: a wait inside the method would move time between the two phases, a clock
    read would time the method by itself). Returns the implicit host reads per batch
    (``{"predict": …, "adapt": …}``), which a data-dependent method may need."""
    found: dict[str, list[str]] = {"predict": [], "adapt": []}
    reads = {"predict": 0, "adapt": 0}
    for x in xs:
        with _HostReads() as mode, _watch_calls(found["predict"]):
            method.predict(x)
        reads["predict"] += mode.count
        with _HostReads() as mode, _watch_calls(found["adapt"]):
            method.adapt()
        reads["adapt"] += mode.count
    bad = [f"{phase} calls {', '.join(sorted(set(calls)))}" for phase, calls in found.items() if calls]
    _require(not bad, "; ".join(bad) + " (the tracer owns the clock and the synchronisation)")
    return {phase: n / max(1, len(xs)) for phase, n in reads.items()}


# ---------------------------------------------------------------------- warm-up
def _record_shapes(model: nn.Module, into: list[set]) -> Callable[[], None]:
    def hook(module: nn.Module, args: tuple[Any, ...], name: str) -> None:
        if args and isinstance(args[0], torch.Tensor):
            into[-1].add((name, tuple(args[0].shape)))

    handles = [m.register_forward_pre_hook(functools.partial(hook, name=n)) for n, m in model.named_modules()]

    def remove() -> None:
        for h in handles:
            h.remove()

    return remove


def tracer_warm_up(method: TTAMethod, x: torch.Tensor, copies: int = 5, seed: int = 0) -> None:
    """What the tracer runs before its clock starts: ``copies`` noise-perturbed copies of the
    first batch through predict and adapt, :meth:`~TTAMethod.warm_up_shapes`, one frozen
    predict, then ``reset()``."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    for _ in range(copies):
        noisy = (x.cpu() + 0.25 * torch.randn(x.shape, generator=gen)).to(x.device)
        method.predict(noisy)
        method.adapt()
    method.warm_up_shapes(x)
    method.freeze()
    method.predict(x)
    method.adapt()
    method.unfreeze()
    method.reset()


def check_warm_up(
    make: Callable[[], TTAMethod], xs: Sequence[torch.Tensor], copies: int = 1, fresh: Sequence[torch.Tensor] | None = None
) -> None:
    """Every input shape the model meets over the stream (its own or a submodule's: a subset
    of the batch the method selects, an augmented view) was met during the tracer's warm-up,
    so a library's first pass at a new shape never lands in a timed event; and the warm-up
    leaves no trace (after it, the stream replays a fresh method's outputs bit for bit).
    ``copies``: noisy copies of the first batch (the tracer runs five; one is stricter, as a
    shape met only by chance in a copy is not counted on). ``fresh``: the outputs of a fresh
    ``make()`` over ``xs``, where already computed (the kit reuses the reset check's)."""
    if fresh is None:
        fresh = run_stream(make(), xs)
    method = make()
    shapes: list[set] = [set()]  # [warm-up, batch 0, batch 1, …]: (module name, input shape)
    remove = _record_shapes(method.model, shapes)
    try:
        tracer_warm_up(method, xs[0], copies)
        for x in xs:
            shapes.append(set())
            method.predict(x)
            method.adapt()
    finally:
        remove()
    warm, seen = shapes[0], shapes[1:]
    missing = [(i, shape) for i, batch in enumerate(seen) for shape in sorted(batch - warm)]
    if missing:
        i, (name, shape) = missing[0]
        where = f"module '{name}'" if name else "the model"
        raise AssertionError(
            f"batch {i}: {where} met input shape {list(shape)} that the warm-up never ran "
            f"({len(missing)} such shape(s) over the stream); override warm_up_shapes() to run it untimed"
        )
    grads = [n for n, p in method.model.named_parameters() if p.grad is not None]
    _require(not grads, f"gradients left on {grads[:3]} after the warm-up")
    method.reset()
    try:
        assert_outputs_equal(fresh, run_stream(method, xs))
    except AssertionError as exc:
        raise AssertionError(f"after the warm-up and reset(), {exc}") from None
