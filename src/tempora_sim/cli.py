"""``tempora-sim``: the simulator's command group. Subcommands live in their own modules.

Every failure is one ``tempora-sim: error: …`` line on stderr with exit status 2 (click's usage
errors included; see :class:`tempora_schema.command.OneLineGroup` and ``docs/errors.md``).
A new subcommand is a module with ``@main.command("name")`` listed in :data:`SUBCOMMAND_MODULES`.
"""

from __future__ import annotations

import sys

from tempora_schema.command import guard_startup_interrupt, is_tool_process

if is_tool_process(__name__, "tempora-sim"):
    guard_startup_interrupt("tempora-sim")  # before polars, numba and matplotlib are imported

import click  # noqa: E402

from tempora_schema.command import OneLineGroup  # noqa: E402

from . import __version__  # noqa: E402

PROG = "tempora-sim"

main = OneLineGroup(
    name=PROG, prog=PROG,
    help="Replay Tempora traces under temporal constraints (discrete, continuous, amortised).",
)
main = click.version_option(__version__, "--version", prog_name=PROG)(main)

#: Modules that add a subcommand to :data:`main` when imported.
SUBCOMMAND_MODULES = ("tempora_sim.cli_sweep", "tempora_sim.cli_report", "tempora_sim.cli_validate")


def _register_subcommands() -> None:
    import importlib

    for mod in SUBCOMMAND_MODULES:
        importlib.import_module(mod)


_register_subcommands()


if __name__ == "__main__":
    # `python -m tempora_sim.cli`: run the importable module's group, on which the
    # subcommand modules registered themselves (this __main__ copy is a different object).
    from tempora_sim.cli import main as _main

    sys.exit(_main.main(standalone_mode=False))
