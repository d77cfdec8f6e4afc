"""``tempora-sim``: one module a subcommand, each thin over the library."""
