"""``tempora-sim``: the simulator's command group. Subcommands live in their own modules.

Every failure is one ``tempora-sim: error: …`` line on stderr with exit status 2 (click's usage
errors included; see :class:`tempora_schema.command.OneLineGroup` and ``docs/errors.md``).
A new subcommand is a module with ``@main.command("name")`` listed in :data:`SUBCOMMAND_MODULES`.
"""

from __future__ import annotations

import os as _os
import signal as _signal
import sys


def _interrupted_at_start_up(signum, frame):  # noqa: ARG001 - signal handler signature
    _os.write(2, b"tempora-sim: interrupted\n")
    _os._exit(130)


# Ctrl-C while the heavy modules import (seconds) is one line, not a KeyboardInterrupt traceback.
# Only in the tool's own process (script or `python -m`), never when a library imports this
# module; OneLineGroup.run restores Python's handler once the command starts. Nothing but the
# standard library may be imported before this line.
if __name__ == "__main__" or _os.path.basename(sys.argv[0] if sys.argv else "") == "tempora-sim":
    _signal.signal(_signal.SIGINT, _interrupted_at_start_up)

import click  # noqa: E402

from tempora_schema.command import OneLineGroup  # noqa: E402

PROG = "tempora-sim"


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--version``, as click's version option prints it; the version is looked up only when
    asked for (reading the package metadata is a cost every sweep would pay otherwise)."""
    if not value or ctx.resilient_parsing:
        return
    from . import __version__

    click.echo(f"{PROG}, version {__version__}", color=ctx.color)
    ctx.exit()


main = OneLineGroup(
    name=PROG,
    prog=PROG,
    help="Replay Tempora traces under temporal constraints (discrete, continuous, amortised).",
)
main = click.option(
    "--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version, help="Show the version and exit."
)(main)

#: Modules that add a subcommand to :data:`main` when imported.
SUBCOMMAND_MODULES = (
    "tempora_sim.cli_sweep",
    "tempora_sim.cli_report",
    "tempora_sim.cli_migrate",
    "tempora_sim.cli_advise",
    "tempora_sim.cli_validate",
)


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
