"""Conformance kit: does a method keep the promises every built-in method keeps to the tracer?

The tracer times ``predict`` and ``adapt`` separately, resets the method between episodes,
and evaluates frozen copies on the side by snapshot and restore (docs/design/design.md §2, §5). A
method that breaks one of those promises produces a trace that looks fine and is wrong. This
kit runs a method on a few batches of the demo data, around a committed demo model, and checks:

- ``build``: it builds with its defaults and records them as JSON-ready hyperparameters;
- ``options``: an unknown option and a wrong-typed one are refused with a one-line
  :class:`MethodError`; every option given is recorded as given;
- ``reset``: after ``reset()`` the same stream gives bit-identical outputs;
- ``snapshot-restore``: snapshot, a frozen detour, restore: the continuation is bit-identical;
- ``frozen``: frozen ``predict``/``adapt`` change no parameter, buffer or method state;
- ``updated``: the flag means what it says: a batch reported ``updated = False`` leaves the
  next prediction exactly as it would be had the batch never been seen, and one reported
  ``True`` changed the method's state;
- ``predict-adapt``: ``predict`` returns detached ``[N, C]`` outputs and learns nothing
  (no backward pass, no parameter or optimiser change); a gradient-free method does no tensor
  work in ``adapt``;
- ``no-sync``: neither phase synchronises the device or reads a clock (detected by watching
  the calls: ``torch.*.synchronize``, CUDA stream/event waits, ``time.*``, ``datetime.now``);
  the implicit host reads (``.item()``, ``bool(tensor)``, …) are counted and reported;
- ``warm-up``: every input shape a stream meets was met by the tracer's untimed warm-up
  (its noisy copies of the first batch and :meth:`~TTAMethod.warm_up_shapes`), and the
  warm-up leaves no trace in what follows.

Use it from a test::

    from tempora_trace.methods.testing import assert_conforms
    def test_my_method_conforms():
        assert_conforms(MyMethod)             # AssertionError naming every failed check

or from the shell: ``tempora-trace check-method my-method`` (a name, ``module:CLASS`` or
``PATH.py:CLASS``): one line per check, exit status 1 when one fails. The primitives
(:func:`check_reset_bit_identical` and friends) take any method and list of batches, for tests
on models and data of one's own. Nothing here imports pytest; a failed check raises
:class:`AssertionError` (never an ``assert`` statement, so ``python -O`` checks the same).
"""

from __future__ import annotations

import contextlib
import copy
import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch
from torch.overrides import TorchFunctionMode

from . import get_method
from ._registry import MethodRef, check_method_class
from .base import MethodContext, MethodError, TTAMethod
from .lazy_imports import load_pending
from .rng import MethodRNG
from .testing_device import check_no_sync, check_warm_up
from .testing_stream import (
    DEMO_MODELS,
    _pick_norm,
    _require,
    assert_outputs_equal,
    assert_same_state,
    demo_batches,
    demo_model,
    demo_source_images,
    run_stream,
    state_of,
)

__all__ = [
    "CHECKS",
    "CheckResult",
    "assert_conforms",
    "assert_outputs_equal",
    "assert_same_state",
    "check_frozen_changes_nothing",
    "check_gradient_free",
    "check_hparams",
    "check_method",
    "check_no_sync",
    "check_options",
    "check_predict_adapt_split",
    "check_reset_bit_identical",
    "check_snapshot_restore",
    "check_updated_flag",
    "check_warm_up",
    "demo_batches",
    "demo_model",
    "demo_source_images",
    "forbid_backward",
    "run_stream",
    "state_of",
    "torch_calls",
]


# ---------------------------------------------------------------------- contract checks
def check_reset_bit_identical(method: TTAMethod, xs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Adapting over ``xs``, resetting and adapting again reproduces every output exactly.
    Returns the outputs (those of ``method`` as given, for a fresh method: what
    :func:`check_warm_up` compares against)."""
    first = run_stream(method, xs)
    method.reset()
    second = run_stream(method, xs)
    try:
        assert_outputs_equal(first, second)
    except AssertionError as exc:
        raise AssertionError(f"after reset(), {exc} (is some state outside the model, optimiser and extra_state()?)") from None
    return first


def check_snapshot_restore(method: TTAMethod, xs: Sequence[torch.Tensor], split: int = 2) -> None:
    """The tracer's frozen-evaluation detour: snapshot mid-stream, evaluate frozen, restore
    and continue; the continuation is bit-identical to never having left."""
    run_stream(method, xs[:split])
    snap = method.snapshot()
    straight = run_stream(method, xs[split:])
    method.restore(snap)
    method.freeze()
    run_stream(method, xs)
    method.unfreeze()
    method.restore(snap)
    resumed = run_stream(method, xs[split:])
    try:
        assert_outputs_equal(straight, resumed)
    except AssertionError as exc:
        raise AssertionError(f"continuing after snapshot/freeze/restore: {exc}") from None


def check_frozen_changes_nothing(method: TTAMethod, xs: Sequence[torch.Tensor], warmup: int = 2) -> list[torch.Tensor]:
    """After some adaptation, frozen predict/adapt change no parameter, buffer or extra state,
    report no update, and the same batch gives the same frozen output twice. Returns the
    frozen outputs."""
    run_stream(method, xs[:warmup])
    method.freeze()
    before = state_of(method)
    outs = []
    for x in xs:
        outs.append(method.predict(x).clone())
        method.adapt()
        _require(method.last_updated is False, f"frozen {method.name} reports last_updated = {method.last_updated!r}")
    again = run_stream(method, xs[:1])
    try:
        assert_same_state(before, state_of(method))
    except AssertionError as exc:
        raise AssertionError(f"frozen mode changed the {exc}") from None
    _require(torch.equal(outs[0], again[0]), "frozen output of the same batch changed")
    method.unfreeze()
    return outs


def _random_states(method: TTAMethod) -> tuple[torch.Tensor, list[dict[str, torch.Tensor]]]:
    """torch's global generator state and that of every MethodRNG the method holds."""
    rngs = [v for v in vars(method).values() if isinstance(v, MethodRNG)]
    return torch.get_rng_state(), [copy.deepcopy(r.state()) for r in rngs]


def _set_random_states(method: TTAMethod, states: tuple[torch.Tensor, list[dict[str, torch.Tensor]]]) -> None:
    rngs = [v for v in vars(method).values() if isinstance(v, MethodRNG)]
    torch.set_rng_state(states[0])
    for rng, state in zip(rngs, states[1]):
        rng.load(copy.deepcopy(state))


def _same_state(a: Any, b: Any) -> bool:
    try:
        assert_same_state(a, b)
    except AssertionError:
        return False
    return True


def check_updated_flag(method: TTAMethod, xs: Sequence[torch.Tensor]) -> str:
    """``updated`` (``last_updated`` after ``adapt``) means "this batch changed state that later
    predictions depend on". For each batch j but the last:

    - reported False: the prediction of batch j + 1 after batch j equals, bit for bit, its
      prediction from the state before batch j (batch j skipped), with the same random-number
      states (torch's and every :class:`MethodRNG` of the method) in both;
    - reported True: the method's state (model, optimiser, ``extra_state()``) differs from the
      state before batch j (an unchanged state cannot change later predictions).

    The stream then continues from batch j's state. Returns how many batches reported each."""
    counts = {True: 0, False: 0}
    for j in range(len(xs) - 1):
        before = method.snapshot()
        method.predict(xs[j])
        method.adapt()
        flag = method.last_updated
        _require(isinstance(flag, bool), f"{method.name}.last_updated is {flag!r}, not a bool")
        counts[flag] += 1
        after = method.snapshot()
        randoms = _random_states(method)
        if flag:
            _require(
                not _same_state(before, after),
                f"batch {j}: {method.name} reported updated = True but its state (model, optimiser, extra_state()) did not change",
            )
            continue
        seen = method.predict(xs[j + 1]).clone()
        method.skip_adapt()
        method.restore(before)
        _set_random_states(method, randoms)
        skipped = method.predict(xs[j + 1]).clone()
        method.skip_adapt()
        if not torch.equal(seen, skipped):
            raise AssertionError(
                f"batch {j}: {method.name} reported updated = False, but the next prediction differs from the one made "
                f"without batch {j} (max |Δ| = {(seen - skipped).abs().max().item():.3g}): report True when a batch changes "
                "state that later predictions depend on"
            )
        method.restore(after)
        _set_random_states(method, randoms)
    return f"batches reporting updated: {counts[True]} true, {counts[False]} false"


@contextlib.contextmanager
def forbid_backward(why: str = "backward called by a gradient-free method") -> Iterator[None]:
    """Fail if anything runs autograd's backward inside the block."""
    original = torch.autograd.backward

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(why)

    torch.autograd.backward = refuse
    try:
        yield
    finally:
        torch.autograd.backward = original


class _CountTorchCalls(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.calls.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def torch_calls(fn: Callable[[], Any]) -> list[str]:
    """Names of the torch functions ``fn`` calls (an oracle for "no work here")."""
    with _CountTorchCalls() as mode:
        fn()
    return mode.calls


def check_gradient_free(method: TTAMethod, xs: Sequence[torch.Tensor], adapt_reports_no_update: bool = True) -> None:
    """No backward, no parameter requiring grad is touched, and ``adapt`` does no tensor work:
    the method's extrinsic time ℓ is ≈ 0 by construction. ``adapt_reports_no_update``: also
    require ``last_updated`` False after ``adapt`` (a method whose ``predict`` moves statistics,
    like AdaBN, reports that update)."""
    before = state_of(method)["model"]
    with forbid_backward():
        for x in xs:
            out = method.predict(x)
            _require(not out.requires_grad, f"{method.name}.predict returned a tensor attached to the graph")
            calls = torch_calls(method.adapt)
            _require(calls == [], f"{method.name}.adapt did tensor work: {calls[:5]}")
            if adapt_reports_no_update:
                _require(method.last_updated is False, f"gradient-free {method.name}.adapt reports an update")
    after = state_of(method)["model"]
    for k, v in before.items():
        if v.is_floating_point() and "running" not in k:
            _require(torch.equal(v, after[k]), f"gradient-free {method.name} changed parameter {k}")


def check_hparams(method: TTAMethod, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """Hyperparameters are JSON-ready and name every ``required`` key."""
    hp = method.hparams()
    _require(isinstance(hp, dict), f"{method.name}.hparams() returned {type(hp).__name__}, not a dict")
    try:
        json.dumps(hp, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise AssertionError(f"{method.name}.hparams() is not JSON-ready: {exc}") from None
    missing = [k for k in required if k not in hp]
    _require(not missing, f"{method.name}.hparams() lacks {missing}")
    return hp


def _wrong_type(value: Any) -> Any:
    """A value no option with this default may accept."""
    if isinstance(value, str):
        return 12345
    return "not-a-number" if not isinstance(value, bool) else "maybe"


def check_options(make: Callable[..., TTAMethod], context: MethodContext, given: dict[str, Any] | None = None) -> None:
    """Options are validated and recorded: ``make(**params)`` builds the method (with the
    options ``given`` to the check, which ``make`` passes itself). Every option given
    explicitly (at its default) is recorded as given, and ``make()`` records ``given`` over the
    defaults; an unknown option and a wrong-typed value of each option are refused with a
    :class:`MethodError`."""
    given = dict(given or {})
    method = make()
    cls = type(method)
    options = cls.all_params(context)
    hp = check_hparams(method, tuple(options))
    again = make(**options)
    recorded = check_hparams(again, tuple(options))
    for key, value in options.items():
        want = json.loads(json.dumps(value, default=str))
        _require(json.loads(json.dumps(recorded[key], default=str)) == want, f"option {key}={value!r} given, recorded as {recorded[key]!r}")
        if key in given:
            want = json.loads(json.dumps(given[key], default=str))
            _require(json.loads(json.dumps(hp[key], default=str)) == want, f"option {key}={given[key]!r} given, recorded as {hp[key]!r}")
        else:
            _require(json.loads(json.dumps(hp[key], default=str)) == want, f"default {key}={value!r} recorded as {hp[key]!r}")
    try:
        make(no_such_option_xyz=1)
    except MethodError:
        pass
    else:
        raise AssertionError("an unknown option was accepted (call super().__init__(model, context, **params))")
    for key, value in options.items():
        if value is None or isinstance(value, (list, dict)):
            continue
        bad = _wrong_type(value)
        try:
            make(**{key: bad})
        except MethodError:
            continue
        except Exception as exc:
            raise AssertionError(
                f"option {key}={bad!r} raised {type(exc).__name__}, not a one-line MethodError (tempora_trace.methods.check_params)"
            ) from None
        raise AssertionError(f"option {key}={bad!r} was accepted (default {value!r}; validate it: tempora_trace.methods.check_params)")


def _parameters(method: TTAMethod) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in method.model.named_parameters()}


def check_predict_adapt_split(method: TTAMethod, xs: Sequence[torch.Tensor], num_classes: int) -> None:
    """``predict`` returns detached ``[N, num_classes]`` outputs and learns nothing from its
    batch (no backward pass, no parameter or optimiser change: that is ``adapt``'s work, timed
    apart; a method that declares ``adapts_before_output`` may run a backward pass in
    ``predict`` but must leave parameters and optimiser as they were); a gradient-free method
    (``family = "gradient-free"``) does no work in ``adapt``."""
    for i, x in enumerate(xs):
        before = _parameters(method)
        opt = copy.deepcopy(method.optimizer.state_dict()) if method.optimizer is not None else None
        if method.adapts_before_output:  # learns inside predict, must undo it before returning
            out = method.predict(x)
        else:
            with forbid_backward(f"{method.name}.predict ran a backward pass: learning from the batch belongs in adapt()"):
                out = method.predict(x)
        _require(not out.requires_grad, f"{method.name}.predict returned a tensor attached to the graph")
        _require(
            tuple(out.shape) == (x.shape[0], num_classes),
            f"{method.name}.predict returned shape {tuple(out.shape)}, not {(x.shape[0], num_classes)}",
        )
        changed = [n for n, p in method.model.named_parameters() if not torch.equal(p.detach(), before[n])]
        _require(not changed, f"batch {i}: predict changed parameters {changed[:3]}: an update belongs in adapt()")
        if opt is not None:
            try:
                assert_same_state(opt, method.optimizer.state_dict())  # type: ignore[union-attr]
            except AssertionError:
                raise AssertionError(f"batch {i}: predict changed the optimiser state: the step belongs in adapt()") from None
        method.adapt()
    if method.family == "gradient-free":
        method.reset()
        check_gradient_free(method, xs, adapt_reports_no_update=False)


# ---------------------------------------------------------------------- the kit
@dataclass
class CheckResult:
    """One check's outcome: ``ok``, or the one-line reason it failed; ``note``: what it found."""

    name: str
    ok: bool
    message: str = ""
    seconds: float = 0.0

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}" + (f": {self.message}" if self.message else "")


#: The checks, in the order they run.
CHECKS = ("build", "options", "reset", "snapshot-restore", "frozen", "updated", "predict-adapt", "no-sync", "warm-up")


def _resolve(method: str | type[TTAMethod]) -> type[TTAMethod]:
    if isinstance(method, str):
        return get_method(method)
    check_method_class(method, getattr(method, "__name__", repr(method)))
    return method


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if isinstance(exc, AssertionError) and text else f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def check_method(
    method: str | type[TTAMethod],
    params: dict[str, Any] | None = None,
    *,
    batches: int = 6,
    batch_size: int = 16,
    norm: str | None = None,
    device: str = "cpu",
    checks: Sequence[str] = CHECKS,
    threads: int | None = 1,
    on_result: Callable[[CheckResult], None] | None = None,
) -> list[CheckResult]:
    """Run the conformance checks on ``method`` (a class, a registry name, ``module:CLASS`` or
    ``PATH.py:CLASS``) with options ``params``, on ``batches`` demo batches of ``batch_size``
    around the demo model of ``norm`` (default: the first of bn, gn, ln the method supports).
    Returns one :class:`CheckResult` per check (``on_result`` sees each as it finishes); a
    method that does not build fails ``build`` and the rest are not run. ``threads``: torch
    intra-op threads while checking (one by default: fast on a shared machine, and the
    replays compare bit for bit whatever the thread count); ``None`` leaves torch's setting."""
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _check_method(method, params, batches, batch_size, norm, device, checks, on_result)
    finally:
        torch.set_num_threads(previous)


def run_checks(
    ref: MethodRef,
    params: dict[str, Any],
    *,
    batches: int,
    batch_size: int,
    norm: str | None,
    device: str,
    threads: int,
    echo: Callable[[str], None],
) -> bool:
    """``tempora-trace check-method``: :func:`check_method` on the resolved method ``ref``, one
    line to ``echo`` before, one per check as it finishes and one summing up; True when every
    check passed."""
    kit = ", ".join(f"{k}={v}" for k, v in kit_options(ref.cls, params).items())
    echo(
        f"checking {ref.name} ({ref.source.describe()}) on {batches} demo batches of {batch_size}"
        + (f" (kit options: {kit})" if kit else "")
    )
    results = check_method(
        ref.cls,
        params,
        batches=batches,
        batch_size=batch_size,
        norm=norm,
        device=device,
        threads=threads,
        on_result=lambda r: echo(r.line()),
    )
    failed = [r for r in results if not r.ok]
    echo(f"{ref.name}: {len(results) - len(failed)} of {len(results)} checks passed")
    return not failed


def kit_options(cls: type[TTAMethod], params: dict[str, Any] | None) -> dict[str, Any]:
    """The method's ``kit_params`` that ``params`` (the options given to the check) leave in force."""
    return {k: v for k, v in cls.kit_params.items() if k not in (params or {})}


def _check_method(
    method: str | type[TTAMethod],
    params: dict[str, Any] | None,
    batches: int,
    batch_size: int,
    norm: str | None,
    device: str,
    checks: Sequence[str],
    on_result: Callable[[CheckResult], None] | None,
) -> list[CheckResult]:
    cls = _resolve(method)
    params = {**kit_options(cls, params), **(params or {})}
    norm = norm or _pick_norm(cls)
    if norm not in cls.compatible_norms:
        raise MethodError(f"method '{cls.name}' does not run on {norm} models (compatible_norms: {sorted(cls.compatible_norms)})")
    unknown = [c for c in checks if c not in CHECKS]
    if unknown:
        raise MethodError(f"unknown check(s) {unknown}; known: {', '.join(CHECKS)}")
    xs = demo_batches(batches, batch_size, device=device)
    context = MethodContext(
        num_classes=10,
        dataset_family="cifar",
        batch_size=batch_size,
        device=str(device),
        model_name=DEMO_MODELS[norm],
        norm_kind=norm,
        source_images=demo_source_images(batches * batch_size),
    )

    def make(**override: Any) -> TTAMethod:
        torch.manual_seed(0)  # a method seeding from torch's generator starts alike every time
        method = cls(demo_model(norm, device), context, **{**params, **override})
        load_pending()  # as the tracer does before its clock: no check sees a module imported
        return method

    _check_given(cls, params, context, make)

    #: a fresh method's outputs over xs, once the reset check has computed them (make() is
    #: deterministic: it seeds torch), so the warm-up check need not run the stream again
    fresh: dict[str, list[torch.Tensor]] = {}

    def reset_check() -> str:
        fresh["outputs"] = check_reset_bit_identical(make(), xs)
        return ""

    tasks: dict[str, Callable[[], str]] = {
        "build": lambda: (check_hparams(make()), "")[1],
        "options": lambda: (check_options(make, context, params), "")[1],
        "reset": reset_check,
        "snapshot-restore": lambda: (check_snapshot_restore(make(), xs, split=max(1, len(xs) // 2)), "")[1],
        "frozen": lambda: (check_frozen_changes_nothing(make(), xs, warmup=max(1, len(xs) // 2)), "")[1],
        "updated": lambda: check_updated_flag(make(), xs),
        "predict-adapt": lambda: (check_predict_adapt_split(make(), xs, context.num_classes), "")[1],
        "no-sync": lambda: _host_note(check_no_sync(make(), xs)),
        "warm-up": lambda: (check_warm_up(make, xs, fresh=fresh.get("outputs")), "")[1],
    }
    results: list[CheckResult] = []
    built = True
    for name in ("build", *[c for c in CHECKS if c in checks and c != "build"]):
        t0 = time.perf_counter()
        if not built:
            result = CheckResult(name, False, "not run: the method does not build")
        else:
            try:
                result = CheckResult(name, True, tasks[name]())
            except (Exception, SystemExit) as exc:  # a failed check, or the method raising (or exiting) inside it
                where = "" if isinstance(exc, AssertionError) else _raised_where(exc)
                result = CheckResult(name, False, where + _one_line(exc))
            if name == "build" and not result.ok:
                built = False
        result.seconds = time.perf_counter() - t0
        if name in checks:
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results


def _check_given(cls: type[TTAMethod], params: dict[str, Any], context: MethodContext, make: Callable[..., TTAMethod]) -> None:
    """Options given to the check that the method does not have, or refuses while its defaults
    build, are the caller's mistake, not the method's: one MethodError before any check."""
    if not params:
        return
    unknown = sorted(set(params) - set(cls.all_params(context)))
    if unknown:
        raise MethodError(
            f"--param {unknown[0]}: method '{cls.name}' has no option '{unknown[0]}'; options: {', '.join(sorted(cls.all_params(context)))}"
        )
    try:
        make()
    except MethodError as exc:
        try:
            make(**cls.all_params(context))
        except (Exception, SystemExit):
            return  # the defaults do not build either: the build check reports it
        raise MethodError(f"--param: {exc}") from None
    except (Exception, SystemExit):
        return  # the method itself fails to build: the build check reports it


def _raised_where(exc: BaseException) -> str:
    """``raised in predict: `` when the traceback passes through a method's predict/adapt."""
    tb = exc.__traceback__
    phase = ""
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name in ("predict", "adapt", "__init__", "warm_up_shapes", "reset", "restore", "snapshot") and isinstance(
            frame.f_locals.get("self"), TTAMethod
        ):
            phase = frame.f_code.co_name
            break
        tb = tb.tb_next
    return f"raised in {phase}: " if phase else "raised: "


def _host_note(reads: dict[str, float]) -> str:
    return f"host reads per batch (.item(), bool(tensor), …): predict {reads['predict']:g}, adapt {reads['adapt']:g}"


def assert_conforms(method: str | type[TTAMethod], params: dict[str, Any] | None = None, **kwargs: Any) -> list[CheckResult]:
    """:func:`check_method`, raising one AssertionError that lists every failed check."""
    results = check_method(method, params, **kwargs)
    failed = [r.line() for r in results if not r.ok]
    if failed:
        raise AssertionError("\n".join(failed))
    return results
