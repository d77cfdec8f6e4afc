"""Kept so that code written against earlier releases still imports: the gradient-method base
and its helpers now live in the public module :mod:`tempora_trace.methods.gradient`."""

from .gradient import *  # noqa: F401,F403
