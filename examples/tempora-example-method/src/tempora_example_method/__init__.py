"""Pseudo-Label test-time adaptation packaged as a Tempora method plugin."""

from .pseudo_label import PseudoLabel

__all__ = ["PseudoLabel"]
__version__ = "0.1.0"
