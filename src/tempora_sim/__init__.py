"""tempora_sim: replay schema-v1 traces under any ρ / T / B grid. Never imports torch."""

__version__ = "0.1.0"
