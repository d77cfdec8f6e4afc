"""``tempora-sim``: the simulator's command group. Subcommands live in their own modules."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tempora")
def main() -> None:
    """Replay Tempora traces under temporal constraints (discrete, continuous, amortised)."""


def _register_subcommands() -> None:
    # Each subcommand module adds itself to `main`; importing here keeps start-up lazy-free
    # but lets the sweep and the report grow independently.
    import importlib

    for mod in ("tempora_sim.cli_sweep", "tempora_sim.cli_report", "tempora_sim.cli_validate"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:
                raise


_register_subcommands()


if __name__ == "__main__":
    # `python -m tempora_sim.cli`: run the importable module's group, on which the
    # subcommand modules registered themselves (this __main__ copy is a different object).
    from tempora_sim.cli import main as _main

    _main()
