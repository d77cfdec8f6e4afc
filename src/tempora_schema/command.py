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

import math
import os
import re
import signal
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import click

from .errors import EXIT_INTERRUPTED, EXIT_USAGE, OptionError, TemporaError, describe_os_error

#: Largest value an int32 column (steps, batch sizes, counts) can hold.
INT32_MAX = 2**31 - 1
#: Largest value an int64 column (seeds, bytes) can hold.
INT64_MAX = 2**63 - 1
#: Grid values beyond this many are refused (a grid is replayed for every trace and episode).
MAX_GRID_VALUES = 1_000_000


def _one_line(text: str) -> str:
    """Newlines joined; undecodable file-name bytes (surrogates) shown as \\xNN, never a crash."""
    text = str(text).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return " ".join(part.strip() for part in text.strip().splitlines() if part.strip())


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
        handler = signal.getsignal(signal.SIGINT)
        if getattr(handler, "__name__", "") == "_interrupted_at_start_up" and _in_main_thread():
            signal.signal(signal.SIGINT, signal.default_int_handler)  # the CLI's start-up guard is done
        args = sys.argv[1:] if args is None else list(args)
        args, debug = _debug_flag(args)
        extra.pop("windows_expand_args", None)
        if complete_var is None:
            complete_var = f"_{prog.replace('-', '_').upper()}_COMPLETE"
        if os.environ.get(complete_var):
            self._main_shell_completion(extra, prog, complete_var)  # exits
        if not args:
            click.echo(self.get_help(click.Context(self, info_name=prog)))
            return 0
        previous = warnings.showwarning
        warnings.showwarning = lambda message, category, *a, **k: click.echo(f"{prog}: warning: {_one_line(str(message))}", err=True)
        try:
            with self.make_context(prog, args, **extra) as ctx:
                self.invoke(ctx)
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
            if debug:  # what lies behind the one line (a plugin's import error, for example)
                import traceback

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
        finally:
            warnings.showwarning = previous


def _debug_flag(args: list[str]) -> tuple[list[str], bool]:
    """``--debug`` anywhere before ``--`` (or ``TEMPORA_DEBUG=1``): an error's line is preceded
    by the traceback behind it. Returns the arguments without the flag, and whether it was on."""
    end = args.index("--") if "--" in args else len(args)
    kept = [a for a in args[:end] if a != "--debug"] + args[end:]
    return kept, len(kept) != len(args) or os.environ.get("TEMPORA_DEBUG", "") not in ("", "0")


def _lower_first(text: str) -> str:
    text = _one_line(text)
    return text[:1].lower() + text[1:] if text[:2] != text[:2].upper() else text


def _in_main_thread() -> bool:
    import threading

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
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise OptionError(f"{option}: " + describe_os_error(exc, path, "cannot read")) from None
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
    count = math.floor((stop - start) / step + 1e-9) + 1
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
