"""What both command-line tools share: one-line errors, a default subcommand, option types.

``tempora-trace`` and ``tempora-sim`` are click groups built on :class:`OneLineGroup`, so every
failure looks the same whichever tool or subcommand produced it::

    tempora-sim: error: --queue: 'abc' is not a valid integer (see `tempora-sim sweep --help`)

one line on stderr, exit status 2: click's own usage errors (unknown option, bad value, missing
argument), every :class:`~tempora_schema.errors.TemporaError`, and any ``OSError`` that reaches
the top (named with its path). Ctrl-C is one line and exit status 130. Warnings are one line each
(``tempora-sim: warning: …``). Adding a subcommand is ``@group.command("name")`` in any module
the CLI imports; nothing else changes.

Units are the same everywhere: times are milliseconds unless suffixed ``ms`` or ``s``; lists
are comma-separated; a grid may also be ``@file`` (values separated by commas, spaces or new
lines) or a range ``start:stop:step`` (both ends included when the step lands on them).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import io
import math
import os
import re
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

import click

from tempora_schema.errors import EXIT_INTERRUPTED, EXIT_USAGE, OptionError, TemporaError, describe_os_error

#: Largest value an int32 column (steps, batch sizes, counts) can hold.
INT32_MAX = 2**31 - 1
#: Largest value an int64 column (seeds, bytes) can hold.
INT64_MAX = 2**63 - 1
#: Grid values beyond this many are refused (a grid is replayed for every trace and episode).
MAX_GRID_VALUES = 1_000_000
#: A grid file (``@FILE``) larger than this is refused unread beyond it (``@/dev/zero``).
MAX_GRID_FILE_BYTES = 64 << 20


#: Control characters (C0 but tab, DEL, C1): an ANSI escape in a name from the data would clear
#: the screen or rewrite a line; :func:`visible` shows each as ``\\xNN`` instead.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def leave_program(code: object) -> NoReturn:
    """End a command-line program whose command has returned ``code``, without the interpreter's
    teardown.

    Every output file is written, fsynced and renamed into place before a command returns, so
    what the teardown would still do is free the loaded modules and their heap: about 0.8 s per
    process once torch and its compiler stack are loaded (a short ``tempora-trace run``: 4.5 s
    against 3.7 s), 0.3 s once Numba's kernels are. Standard output and error are flushed first
    (a closed pipe there is exit status 120, as the interpreter's own exit reports it) and the
    exit handlers still run (logging's flush, multiprocessing's, the weakref finalizers, file
    locks), as on an ordinary exit. Under a profiler or a tracer (``python -m cProfile``,
    coverage), which writes its results in the teardown, the exit is the ordinary one. Only the
    programs call this; a library or notebook caller of a click group keeps the ordinary exit."""
    status = code if isinstance(code, int) else 1
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(status)
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: started with the stream closed (`>&-`)
                stream.flush()
        except (OSError, ValueError):
            status = status or 120
    atexit._run_exitfuncs()
    os._exit(status)


def visible(text: object) -> str:
    """``text`` for a terminal: control characters as ``\\xNN``, undecodable file-name bytes
    (surrogates) as ``\\xNN`` too, never a crash."""
    text = str(text).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _caused_by_interrupt(exc: BaseException) -> bool:
    """Whether a Ctrl-C lies behind ``exc``: Python 3.11 turns a KeyboardInterrupt raised while a
    class body binds its attributes (a dataclass being defined while a command's modules
    import) into a RuntimeError raised from it."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _one_line(text: str) -> str:
    """Newlines joined, every other control character shown (:func:`visible`)."""
    text = str(text).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return visible(" ".join(part.strip() for part in text.strip().splitlines() if part.strip()))


def echo_error(prog: str, message: str) -> None:
    click.echo(f"{prog}: error: {_one_line(message)}", err=True)


class OneLineGroup(click.Group):
    """A click group whose failures are one stderr line ``PROG: error: …`` with exit status 2.

    ``default_command``: arguments that start with an option (``tempora-trace --method tent``)
    go to this subcommand, so the pre-subcommand syntax keeps working. ``aliases`` maps a
    leading legacy option to the arguments it stands for (``--list`` → ``list``).
    """

    def __init__(
        self, *args: Any, prog: str, default_command: str | None = None, aliases: dict[str, Sequence[str]] | None = None, **kwargs: Any
    ):
        kwargs.setdefault("context_settings", {}).setdefault("help_option_names", ["-h", "--help"])
        kwargs["context_settings"].setdefault("max_content_width", 100)
        super().__init__(*args, **kwargs)
        self.prog = prog
        self.default_command = default_command
        self.aliases = dict(aliases or {})

    # -- the default subcommand
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names and args[0] != "--version":
            if args[0] in self.aliases:
                args = [*self.aliases[args[0]], *args[1:]]
            elif self.default_command and args[0].startswith("-"):
                args = [self.default_command, *args]
        return super().parse_args(ctx, args)

    # -- one-line failures
    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        code = self.run(args, complete_var, **extra)
        if standalone_mode:
            sys.exit(code)
        return code

    def run(self, args: Sequence[str] | None = None, complete_var: str | None = None, **extra: Any) -> int:
        """Parse ``args`` and run the subcommand; return the exit status (never raises for input)."""
        prog = self.prog
        args = sys.argv[1:] if args is None else list(args)
        # --debug (anywhere) or TEMPORA_DEBUG=1: an error raised by the user's own code (a
        # model factory, a plugin) prints its traceback above the one error line
        debug = "--debug" in args or os.environ.get("TEMPORA_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")
        args = [a for a in args if a != "--debug"]
        extra.pop("windows_expand_args", None)
        if complete_var is None:
            complete_var = f"_{prog.replace('-', '_').upper()}_COMPLETE"
        if os.environ.get(complete_var):
            self._main_shell_completion(extra, prog, complete_var)  # exits
        if sys.stdout is None:  # started with standard output closed (`>&-`)
            echo_error(prog, "standard output is closed; redirect it to a file or /dev/null")
            return EXIT_USAGE
        previous = warnings.showwarning
        warnings.showwarning = lambda message, category, *a, **k: click.echo(f"{prog}: warning: {_one_line(str(message))}", err=True)
        streams = _GuardedStreams()
        try:
            # the CLI's start-up guard (one line, exit 130) hands over to the except clauses below
            # only here: a Ctrl-C before this line is still the guard's
            handler = signal.getsignal(signal.SIGINT)
            if getattr(handler, "__name__", "") == "_interrupted_at_start_up" and _in_main_thread():
                signal.signal(signal.SIGINT, signal.default_int_handler)
            if not args:
                click.echo(self.get_help(click.Context(self, info_name=prog)))
                sys.stdout.flush()
                return 0
            with self.make_context(prog, args, **extra) as ctx:
                self.invoke(ctx)
            sys.stdout.flush()  # a full or closed pipe is this command's error, in one line
            return 0
        except click.exceptions.Exit as exc:
            return exc.exit_code
        except click.exceptions.UsageError as exc:
            where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
            echo_error(prog, _lower_first(exc.format_message()) + where)
            return EXIT_USAGE
        except click.ClickException as exc:
            echo_error(prog, exc.format_message())
            return EXIT_USAGE
        except TemporaError as exc:
            if debug and getattr(exc, "debug_detail", ""):
                click.echo(str(exc.debug_detail).rstrip(), err=True)  # type: ignore[attr-defined]
            elif debug:  # what lies behind the one line: the exception it was raised from
                import traceback  # lazy: only --debug prints one, and both commands' start-up imports this module

                traceback.print_exception(exc, file=sys.stderr)
            echo_error(prog, str(exc))
            return EXIT_USAGE
        except OSError as exc:
            echo_error(prog, describe_os_error(exc, action="cannot access"))
            return EXIT_USAGE
        except (KeyboardInterrupt, click.exceptions.Abort) as exc:
            detail = str(exc) if isinstance(exc, KeyboardInterrupt) and exc.args else "interrupted"
            click.echo(f"{prog}: {_one_line(detail)}", err=True)
            return EXIT_INTERRUPTED
        except Exception as exc:
            if not _caused_by_interrupt(exc):
                raise
            click.echo(f"{prog}: interrupted", err=True)
            return EXIT_INTERRUPTED
        finally:
            warnings.showwarning = previous
            streams.restore()


#: Narrowest terminal the tables are drawn for: a smaller ``$COLUMNS`` (``COLUMNS=1``) is
#: raised to this while a command runs (rich cannot lay a table out in one column).
MIN_COLUMNS = 40


class StdoutError(TemporaError):
    """Standard output cannot take what a command prints (a full disk, a closed pipe)."""


class _GuardedStdout:
    """``sys.stdout`` while a command runs: a failed write or flush is a one-line
    :class:`StdoutError` naming standard output (not "cannot access output"). The first failure
    sticks: a caller that swallows it (click probes the stream) meets it again at the next
    write or flush, and the command's final flush raises it."""

    def __init__(self, stream: Any):
        self._stream = stream
        self.failed: StdoutError | None = None

    def _guard(self, call: Callable[[], Any]) -> Any:
        if self.failed is not None:
            raise self.failed
        try:
            return call()
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                reason = "the program reading it has stopped (broken pipe)"
            else:
                reason = (exc.strerror or type(exc).__name__).lower()
            self.failed = StdoutError(f"cannot write to standard output: {reason}")
            # what stays buffered would fail again at exit (a second message): send it nowhere
            with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self._stream.fileno())
                os.close(devnull)
            raise self.failed from None

    def write(self, text: str) -> int:
        return self._guard(lambda: self._stream.write(text))

    def flush(self) -> None:
        self._guard(self._stream.flush)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _GuardedStreams:
    """What a command's output needs from the environment, for the command's duration:
    standard streams that never raise UnicodeEncodeError (``PYTHONIOENCODING=ascii``: characters
    the encoding lacks are written as ``\\uXXXX``), a standard output whose failures are one
    line, and a usable ``$COLUMNS``. :meth:`restore` undoes all of it."""

    def __init__(self) -> None:
        self._errors: list[tuple[Any, str]] = []
        for stream in (sys.stdout, sys.stderr):
            errors = getattr(stream, "errors", None)
            if errors == "strict" and hasattr(stream, "reconfigure"):
                with contextlib.suppress(Exception):
                    stream.reconfigure(errors="backslashreplace")
                    self._errors.append((stream, errors))
        self._stdout = sys.stdout
        sys.stdout = _GuardedStdout(sys.stdout)  # type: ignore[assignment]
        self._columns = os.environ.get("COLUMNS")
        try:
            narrow = self._columns is not None and int(self._columns) < MIN_COLUMNS
        except ValueError:
            narrow = True
        if narrow:
            os.environ["COLUMNS"] = str(MIN_COLUMNS)

    def restore(self) -> None:
        if isinstance(sys.stdout, _GuardedStdout):
            sys.stdout = self._stdout
        for stream, errors in self._errors:
            with contextlib.suppress(Exception):
                stream.reconfigure(errors=errors)
        if self._columns is not None:
            os.environ["COLUMNS"] = self._columns


def _lower_first(text: str) -> str:
    text = _one_line(text)
    return text[:1].lower() + text[1:] if text[:2] != text[:2].upper() else text


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


# ------------------------------------------------------------------------ values and units
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_TIME = re.compile(rf"^\s*({_NUMBER})\s*(ms|s)?\s*$")
_RATIO = re.compile(rf"^\s*({_NUMBER})\s*(%)?\s*$")


def _finite(value: float, option: str, item: object) -> float:
    if not math.isfinite(value):
        raise OptionError(f"{option}: '{item}' is not a finite number")
    return value


def parse_time_ms(item: str | float, option: str) -> float:
    """``'1s'`` → 1000.0, ``'500ms'`` → 500.0, ``'250'`` → 250.0 (milliseconds by default)."""
    if isinstance(item, bool):
        raise OptionError(f"{option}: cannot read {item!r} as a time")
    if isinstance(item, (int, float)):
        return _finite(float(item), option, item)
    match = _TIME.match(str(item))
    if not match:
        raise OptionError(f"{option}: cannot read '{item}' as a time (use e.g. 500, 500ms or 1.5s)")
    return _finite(float(match.group(1)) * (1000.0 if match.group(2) == "s" else 1.0), option, item)


def parse_ratio(item: str | float, option: str) -> float:
    """``'70%'`` → 0.7, ``'0.7'`` → 0.7."""
    if isinstance(item, bool):
        raise OptionError(f"{option}: cannot read {item!r} as a fraction")
    if isinstance(item, (int, float)):
        return _finite(float(item), option, item)
    match = _RATIO.match(str(item))
    if not match:
        raise OptionError(f"{option}: cannot read '{item}' as a fraction (use e.g. 0.7 or 70%)")
    return _finite(float(match.group(1)) / (100.0 if match.group(2) else 1.0), option, item)


def parse_int(item: str | int, option: str, low: int = 0, high: int = INT64_MAX) -> int:
    """An integer in ``[low, high]`` (the range the columns and kernels can hold)."""
    if isinstance(item, bool):
        raise OptionError(f"{option}: expected an integer, got {item!r}")
    try:
        value = int(item) if isinstance(item, int) else int(str(item).strip())
    except ValueError:
        raise OptionError(f"{option}: expected an integer, got '{item}'") from None
    if not low <= value <= high:
        raise OptionError(f"{option}: {value} is outside {low}..{high}")
    return value


def split_list(spec: str, option: str) -> list[str]:
    """Comma-separated items; empty items are refused (``'1,,2'`` is a typo, not two values)."""
    parts = [p.strip() for p in str(spec).split(",")]
    if not any(parts):
        raise OptionError(f"{option}: empty list")
    if not all(parts):
        raise OptionError(f"{option}: empty item in '{spec}'")
    return parts


def expand_grid(spec: str | float | Sequence, option: str, parse: Callable[[Any, str], float]) -> list[float]:
    """Grid values from a comma list, ``@file`` or ``start:stop:step`` items (mixable by commas).

    ``parse`` reads one value with its unit (:func:`parse_time_ms`, :func:`parse_ratio`). A range
    uses the unit of its parts: ``1s:10s:1s``; ``0.05:1:0.001`` gives 951 values."""
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        return [parse(spec, option)]
    if not isinstance(spec, str):
        values = [parse(x, option) for x in spec]
        if not values:
            raise OptionError(f"{option}: empty grid")
        return values
    spec = spec.strip()
    if spec.startswith("@"):
        path = Path(spec[1:]).expanduser()
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_GRID_FILE_BYTES + 1)
        except OSError as exc:
            raise OptionError(f"{option}: " + describe_os_error(exc, path, "cannot read")) from None
        if len(data) > MAX_GRID_FILE_BYTES:
            raise OptionError(
                f"{option}: {path} is larger than {MAX_GRID_FILE_BYTES >> 20} MiB, more than a grid of {MAX_GRID_VALUES:,} values needs"
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise OptionError(f"{option}: {path} is not a UTF-8 text file of values") from None
        items = [t for t in re.split(r"[\s,]+", "\n".join(line.split("#")[0] for line in text.splitlines())) if t]
        if not items:
            raise OptionError(f"{option}: {path} holds no values")
    else:
        items = split_list(spec, option)
    values: list[float] = []
    for item in items:
        if item.count(":") == 2:
            values += _range(item, option, parse)
        else:
            values.append(parse(item, option))
        if len(values) > MAX_GRID_VALUES:
            raise OptionError(f"{option}: more than {MAX_GRID_VALUES:,} values")
    return values


def _range(item: str, option: str, parse: Callable[[Any, str], float]) -> list[float]:
    start, stop, step = (parse(p, option) for p in item.split(":"))
    if step <= 0:
        raise OptionError(f"{option}: range '{item}' needs a step > 0")
    if stop < start:
        raise OptionError(f"{option}: range '{item}' ends before it starts")
    span = (stop - start) / step  # inf when the step is tiny beside the span
    if not span < MAX_GRID_VALUES:
        raise OptionError(f"{option}: range '{item}' has more than {MAX_GRID_VALUES:,} values")
    count = math.floor(span + 1e-9) + 1
    if count > MAX_GRID_VALUES:
        raise OptionError(f"{option}: range '{item}' has {count:,} values, more than {MAX_GRID_VALUES:,}")
    # start + i·step, rounded to the step's decimals so 0.05:1:0.001 gives 0.123, not 0.12300000000000001
    digits = max(0, -math.floor(math.log10(step)) + 6) if step < 1 else 6
    return [round(start + i * step, digits) for i in range(count)]


class ValueType(click.ParamType):
    """A click type from a parser that raises :class:`OptionError` (one-line messages)."""

    def __init__(self, name: str, parse: Callable[[str, str], Any]):
        self.name = name
        self.parse = parse

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        option = param.opts[0] if param is not None and param.opts else self.name
        try:
            return self.parse(value, option)
        except OptionError as exc:
            self.fail(str(exc).removeprefix(f"{option}: "), param, ctx)


def time_type(low: float = 0.0, allow_zero: bool = True) -> ValueType:
    """A time (ms, or with ``ms``/``s``), finite and ≥ ``low`` (> ``low`` unless ``allow_zero``)."""

    def parse(text: str, option: str) -> float:
        value = parse_time_ms(text, option)
        if value < low or (not allow_zero and value <= low):
            raise OptionError(f"{option}: must be {'≥' if allow_zero else '>'} {low:g} ms, not {text}")
        return value

    return ValueType("TIME", parse)


def time_list_type(low: float = 0.0) -> ValueType:
    """Comma-separated times, each finite and ≥ ``low``."""

    def parse(text: str, option: str) -> list[float]:
        values = [parse_time_ms(t, option) for t in split_list(text, option)]
        bad = [v for v in values if v < low]
        if bad:
            raise OptionError(f"{option}: every time must be ≥ {low:g} ms (got {bad[0]:g})")
        return values

    return ValueType("TIMES", parse)


def int_list_type(low: int = 0, high: int = INT32_MAX) -> ValueType:
    """Comma-separated integers in ``[low, high]``."""
    return ValueType("INTS", lambda text, option: [parse_int(t, option, low, high) for t in split_list(text, option)])
