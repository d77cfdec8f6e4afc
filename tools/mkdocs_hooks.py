"""mkdocs hooks: the parts of the documentation that are generated, so they cannot go stale.

* The methods reference (``docs/reference/methods.md``) is written from what each registered method
  declares about itself (``name``, ``family``, ``compatible_norms``, ``updates``,
  ``overhead``, ``paper`` and, where present, ``departures``), its module docstring and its
  ``default_params``. A page asks for a generated block with a marker line
  ``<!-- generated: NAME -->`` (or ``<!-- generated: NAME ARGUMENT -->``); :data:`GENERATORS`
  lists the names.
* The command-line reference (``docs/reference/*.md``) is written from the click commands: every
  subcommand, its usage, its help and each option's help (which carries its default).
* The Python API reference (``docs/reference/python-api.md``) is written from each API
  module's ``__all__``: signatures and docstrings.
* Every page under ``docs/`` is reachable: pages that ``mkdocs.yml``'s ``nav`` does not list
  are appended under "More", so adding a page never breaks the build (listing it in ``nav``
  puts it where it belongs).

The generators are plain functions returning Markdown, importable without mkdocs (the test
suite checks them).
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Callable, Iterable

import click

from tempora_trace.methods import builtin_methods, get_method
from tempora_trace.methods.base import MethodContext
from tempora_trace.models import compatible_models

MARKER = re.compile(r"^<!-- generated: ([a-z-]+)(?: ([^ ]+))? -->$", re.MULTILINE)
MORE_SECTION = "More"

#: Contexts in which default hyperparameters are shown: (column title, MethodContext kwargs).
DEFAULT_CONTEXTS = (
    ("ImageNet, ResNet-50", dict(num_classes=1000, dataset_family="imagenet", model_name="resnet50", norm_kind="bn")),
    ("ImageNet, ViT-B/16", dict(num_classes=1000, dataset_family="imagenet", model_name="vit_base_patch16_224", norm_kind="ln")),
    ("CIFAR-10 / demo", dict(num_classes=10, dataset_family="cifar", model_name="cifar-resnet18", norm_kind="bn")),
)

#: Optional declared attributes, shown as a column when at least one method sets them.
OPTIONAL_ATTRIBUTES = (("departures", "departures from the reference code"),)


def _registry() -> list[type]:
    return [get_method(name) for name in builtin_methods()]


def _cell(text: object) -> str:
    """One Markdown table cell: no newlines, escaped pipes."""
    return " ".join(str(text).split()).replace("|", "\\|") or "–"


def _norms(cls: type) -> str:
    order = ("bn", "gn", "ln")
    return ", ".join(n.upper() for n in order if n in cls.compatible_norms)


def _models(cls: type) -> str:
    return ", ".join(f"`{m}`" for m in compatible_models(cls.compatible_norms))


def _family_rank(cls: type) -> tuple[int, str]:
    rank = {"baseline": 0, "gradient-free": 1, "gradient-based": 2}
    return rank.get(cls.family, 3), cls.name


def methods_table() -> str:
    """One row per registered method, from the attributes the method class declares."""
    methods = sorted(_registry(), key=_family_rank)
    extra = [(attr, title) for attr, title in OPTIONAL_ATTRIBUTES if any(getattr(c, attr, "") for c in methods)]
    head = ["method", "family", "what is updated", "where the overhead falls", "norms", "built-in models", "source paper"] + [
        title for _, title in extra
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cls in methods:
        row = [
            f"[`{cls.name}`](#{anchor(cls.name)})",
            cls.family,
            _cell(cls.updates),
            _cell(cls.overhead),
            _norms(cls),
            _models(cls),
            _cell(cls.paper),
        ]
        row += [_optional_cell(cls, attr) for attr, _ in extra]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _optional_cell(cls: type, attr: str) -> str:
    value = getattr(cls, attr, "")
    if attr == "departures":  # declared as data; the full table is on the method-parity page
        return f"[{len(value)}](../results/methods-parity.md#parity-{cls.name})" if value else "–"
    return _cell(value or "–")


def anchor(name: str) -> str:
    """The heading anchor of a method's section in the details block."""
    return "method-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _format_value(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _defaults(cls: type) -> str:
    columns = [(title, cls.default_params(MethodContext(**kwargs))) for title, kwargs in DEFAULT_CONTEXTS]
    keys: list[str] = []
    for _, params in columns:
        keys += [k for k in params if k not in keys]
    if not keys:
        return "No hyperparameters."
    lines = ["| option | " + " | ".join(t for t, _ in columns) + " |", "|---|" + "---|" * len(columns)]
    for key in keys:
        cells = [_cell(_format_value(params[key])) if key in params else "–" for _, params in columns]
        lines.append(f"| `{key}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _docstring(cls: type) -> str:
    """The method module's docstring (what the method does and why), as Markdown."""
    doc = inspect.getdoc(inspect.getmodule(cls)) or inspect.getdoc(cls) or ""
    return doc.replace("``", "`")


def method_details() -> str:
    """A section per registered method: its description and its default hyperparameters."""
    parts = []
    for cls in sorted(_registry(), key=_family_rank):
        parts += [
            f"### `{cls.name}` {{ #{anchor(cls.name)} }}",
            "",
            f"*{cls.family}; {_norms(cls)}; {_cell(cls.paper)}*",
            "",
            _docstring(cls),
            "",
            "Defaults (override with `--param KEY=VALUE`; every value used is stored in the trace):",
            "",
            _defaults(cls),
            "",
        ]
    return "\n".join(parts)


# ------------------------------------------------------------------------ command line
def _escape_text(text: str) -> str:
    """Markdown-safe prose: angle brackets, pipes and asterisks escaped outside `code spans`."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|").replace("*", "\\*")
    for i in range(1, len(parts), 2):
        parts[i] = parts[i].replace("|", "\\|")
    return "`".join(parts)


def _is_unset(value: object) -> bool:
    return value is None or type(value).__name__ == "Sentinel"


def _option_value(param, ctx) -> str:
    if getattr(param, "is_flag", False):
        return "flag"
    if isinstance(param.type, click.Choice):
        return " \\| ".join(f"`{c}`" for c in param.type.choices)
    if isinstance(param.type, click.IntRange):
        low, high = param.type.min, param.type.max
        high = None if high is not None and high >= 2**31 - 1 else high
        if low is not None and high is not None:
            return f"INTEGER {low}–{high}"
        return f"INTEGER ≥ {low}" if low is not None else "INTEGER"
    return _escape_text(param.type.name.upper())


def _option_help(param, ctx) -> str:
    text = " ".join((param.help or "").split())
    default = param.get_default(ctx, call=False)
    if getattr(param, "show_default", False) and "[default:" not in text and not _is_unset(default) and default is not False:
        text += f"  [default: {default}]"
    return _escape_text(text) or "–"


def _command_markdown(command, ctx, level: int) -> list[str]:
    lines = [f"{'#' * level} `{ctx.command_path}`", ""]
    help_text = inspect.cleandoc(command.help or "")
    if help_text:
        lines += [_escape_text(help_text.replace("\b\n", "")), ""]
    usage = " ".join([ctx.command_path, *command.collect_usage_pieces(ctx)])
    lines += ["```", usage, "```", ""]
    params = [p for p in command.get_params(ctx) if not getattr(p, "hidden", False)]
    arguments = [p for p in params if isinstance(p, click.Argument)]
    options = [p for p in params if isinstance(p, click.Option) and "--help" not in p.opts]
    if arguments:
        lines += ["| argument | value |", "|---|---|"]
        lines += [f"| `{p.human_readable_name}` | {p.type.name.upper()}{' …' if p.nargs != 1 else ''} |" for p in arguments]
        lines.append("")
    if options:
        lines += ["| option | value | meaning |", "|---|---|---|"]
        for p in options:
            names = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
            lines.append(f"| {names} | {_option_value(p, ctx)} | {_option_help(p, ctx)} |")
        lines.append("")
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            lines += _command_markdown(sub, click.Context(sub, info_name=name, parent=ctx), level + 1)
    return lines


def cli_command(target: str):
    """The click command named by ``module:attribute``."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def cli_reference(target: str) -> str:
    """Every subcommand and option of the click command ``module:attribute``, as Markdown."""
    command = cli_command(target)
    ctx = click.Context(command, info_name=command.name)
    note = ["Every command accepts `-h`/`--help`, which prints the same text.", ""]
    return "\n".join(note + _command_markdown(command, ctx, level=2)).rstrip() + "\n"


def api_reference(module_name: str) -> str:
    """Every name in ``module_name``'s ``__all__``: its signature and its docstring, as Markdown
    (classes with their public methods)."""
    module = importlib.import_module(module_name)
    out = [inspect.getdoc(module) or "", ""]
    for name in module.__all__:
        obj = getattr(module, name)
        kind = "class" if inspect.isclass(obj) else "function"
        try:
            sig = str(inspect.signature(obj))
        except (TypeError, ValueError):
            sig = ""
        out += [f"### `{module_name}.{name}`", "", f"```python\n{kind} {name}{sig}\n```", "", inspect.getdoc(obj) or "", ""]
        if inspect.isclass(obj) and obj.__module__.startswith(module_name.rsplit(".", 1)[0]):
            for attr, member in inspect.getmembers(obj, inspect.isfunction):
                if not attr.startswith("_") and attr in vars(obj):
                    out += [f"- `{name}.{attr}{inspect.signature(member)}`: {_cell(inspect.getdoc(member) or '')}"]
            out.append("")
    return "\n".join(out).rstrip() + "\n"


GENERATORS: dict[str, Callable[..., str]] = {
    "methods-table": methods_table,
    "method-details": method_details,
    "cli-reference": cli_reference,
    "api-reference": api_reference,
}


def render(markdown: str) -> str:
    """Replace every ``<!-- generated: NAME [ARGUMENT] -->`` line with the generator's output."""

    def replace(match: re.Match) -> str:
        name, argument = match.group(1), match.group(2)
        if name not in GENERATORS:
            raise ValueError(f"unknown generated block '{name}'; known: {', '.join(GENERATORS)}")
        return GENERATORS[name](argument) if argument else GENERATORS[name]()

    return MARKER.sub(replace, markdown)


# ------------------------------------------------------------------------ navigation
def nav_files(nav: Iterable) -> list[str]:
    """Every page path a ``nav`` (list of strings and one-key dicts, nested) refers to."""
    out: list[str] = []
    for item in nav or []:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            for value in item.values():
                if isinstance(value, str):
                    out.append(value)
                else:
                    out += nav_files(value)
    return [p for p in out if not re.match(r"^[a-z]+://", p)]


def unlisted_pages(docs_dir: Path, nav: Iterable) -> list[str]:
    listed = set(nav_files(nav))
    pages = sorted(p.relative_to(docs_dir).as_posix() for p in docs_dir.rglob("*.md"))
    return [p for p in pages if p not in listed]


# ------------------------------------------------------------------------ mkdocs events
def on_config(config):
    extra = unlisted_pages(Path(config["docs_dir"]), config["nav"])
    if config["nav"] is not None and extra:
        config["nav"].append({MORE_SECTION: extra})
    return config


def on_page_markdown(markdown, page, config, files):
    return render(markdown)
