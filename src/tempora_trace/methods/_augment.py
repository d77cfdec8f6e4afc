"""Kept so that code written against earlier releases still imports: the auxiliary views and
:class:`MethodRNG` now live in the public module :mod:`tempora_trace.methods.augment`."""

from .augment import *  # noqa: F401,F403
