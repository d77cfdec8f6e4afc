"""What several test modules share, imported as ``from helpers.NAME import ...``.

Test modules never import one another: a builder, a case table or an assertion that two
modules need lives here (fixtures live in the ``conftest.py`` of the folder they serve).
``tests`` is on the import path (``pythonpath`` in pyproject.toml) for this package alone.

- :mod:`helpers.cifar`: tiny CIFAR-10-C data, a tiny network and the options/config of a tiny run
- :mod:`helpers.byo`: tiny image folders and a user's model file (bring your own)
- :mod:`helpers.methods`: the method contract's checks and tiny models for the per-method tests
- :mod:`helpers.demo_stream`: a short corrupted demo stream and tiny traces for the accuracy checks
- :mod:`helpers.utility_tables`: hand-built utility tables in the sweep's layout
- :mod:`helpers.hostile`: what every hostile-input case asserts, and the faults it injects
- :mod:`helpers.sim_cases`: the inputs ``tempora-sim`` must refuse (sweep, report, show)
- :mod:`helpers.processes`: the environment of a child interpreter that imports what the test imports
- :mod:`helpers.headless`: headless Chromium over the DevTools protocol (also bench/bench_explore.py)
"""
