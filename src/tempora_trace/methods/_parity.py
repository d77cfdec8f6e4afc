"""The departures table, rendered from the methods' own ``departures`` attributes.

``docs/results/methods-parity.md`` holds the rendered table between two marker lines; regenerate it
with ``python -m tempora_trace.methods._parity --write docs/results/methods-parity.md`` (a test checks
that the committed page equals the rendering, so it cannot drift from the code).
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import builtin_methods, get_method
from .base import AS_DEFAULT

BEGIN = "<!-- BEGIN GENERATED: departures (python -m tempora_trace.methods._parity --write docs/results/methods-parity.md) -->"
END = "<!-- END GENERATED: departures -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def departures_markdown() -> str:
    """One section per registered method: its paper, then a table of every departure."""
    out: list[str] = []
    for name in builtin_methods():
        cls = get_method(name)
        out += [f"### `{name}` {{ #parity-{name} }}", "", cls.paper, ""]
        if not cls.departures:
            out += ["No departures: the default behaves as the Tempora reference and the authors' code do.", ""]
            continue
        out += [
            "| Point | Default | Tempora reference (`profile=paper`) | Original authors' code | Why the default |",
            "|---|---|---|---|---|",
        ]
        for d in cls.departures:
            reference = "as default" if d.reference == AS_DEFAULT else d.reference
            out.append(f"| {_cell(d.point)} | {_cell(d.default)} | {_cell(reference)} | {_cell(d.authors)} | {_cell(d.reason)} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def generated_block() -> str:
    return f"{BEGIN}\n\n{departures_markdown()}\n{END}"


def splice(page: str) -> str:
    """``page`` with the text between the markers replaced by the current rendering."""
    start, end = page.index(BEGIN), page.index(END) + len(END)
    return page[:start] + generated_block() + page[end:]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--write"] and len(argv) == 2:
        path = Path(argv[1])
        path.write_text(splice(path.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    sys.stdout.write(departures_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
