"""``tempora-sim``: the simulator's command group. Subcommands live in their own modules.

Every failure is one ``tempora-sim: error: …`` line on stderr with exit status 2 (click's usage
errors included; see :class:`tempora_toolkit.command_line.OneLineGroup` and ``docs/reference/errors.md``).
A new subcommand is a module with ``@main.command("name")`` listed in :data:`SUBCOMMAND_MODULES`;
a command's module is imported when the command is asked for, so ``sweep`` does not load what
``report`` or ``validate`` need.
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

from tempora_toolkit.command_line import OneLineGroup, leave_program  # noqa: E402

PROG = "tempora-sim"


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--version``, as click's version option prints it; the version is looked up only when
    asked for (reading the package metadata is a cost every sweep would pay otherwise)."""
    if not value or ctx.resilient_parsing:
        return
    from tempora_sim import __version__  # lazy: the package metadata is read only for --version

    click.echo(f"{PROG}, version {__version__}", color=ctx.color)
    ctx.exit()


#: Subcommand name -> the module that adds it to :data:`main` when imported.
SUBCOMMAND_MODULES = {
    "sweep": "tempora_sim.commands.sweep",
    "report": "tempora_sim.commands.report",
    "show": "tempora_sim.commands.report",
    "migrate": "tempora_sim.commands.migrate",
    "advise": "tempora_sim.commands.advise",
    "validate": "tempora_sim.commands.validate",
    "explore": "tempora_sim.commands.explore",
    "predict": "tempora_sim.commands.predict",
    "validate-prediction": "tempora_sim.commands.predict",
}


class _SimGroup(OneLineGroup):
    """The command group, importing a subcommand's module on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(SUBCOMMAND_MODULES))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            import importlib  # lazy: only a subcommand's name loads its module (see SUBCOMMAND_MODULES)

            # an unknown name loads them all, so click's "did you mean" sees every command
            for name in [cmd_name] if cmd_name in SUBCOMMAND_MODULES else list(SUBCOMMAND_MODULES):
                importlib.import_module(SUBCOMMAND_MODULES[name])
        return super().get_command(ctx, cmd_name)


main = _SimGroup(
    name=PROG,
    prog=PROG,
    help="Replay Tempora traces under temporal constraints (discrete, continuous, amortised).",
)
main = click.option(
    "--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version, help="Show the version and exit."
)(main)


def run() -> None:
    """The ``tempora-sim`` program (and ``python -m tempora_sim.commands.main``): run the command
    line, then leave without the interpreter's teardown
    (:func:`tempora_toolkit.command_line.leave_program`), which would spend about 0.3 s freeing
    Numba's compiled code after the last line. A library caller that calls :data:`main` keeps the
    ordinary exit (and Numba's ordinary start: :data:`tempora_sim.process.IN_PROGRAM`)."""
    from tempora_sim import process

    process.IN_PROGRAM = True
    leave_program(main.main(standalone_mode=False))


if __name__ == "__main__":
    # `python -m tempora_sim.commands.main`: run the importable module's group, on which the
    # subcommand modules registered themselves (this __main__ copy is a different object).
    from tempora_sim.commands.main import run as _run

    _run()
