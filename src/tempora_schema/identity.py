"""A trace's identity: its comparison group (:class:`GroupKey`, the keys :data:`GROUP_KEYS`),
its method, policy and method source (:class:`TraceIdentity`), and what is derived from them:
the method label, the file stem and the weights' identity. One definition drives the file
name, the metadata, the tracer's ``--resume`` check and the simulator's comparison groups.
Part of :mod:`tempora_schema`, which re-exports every name here."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, Mapping

from tempora_schema.columns import METHOD_SOURCE_KEY
from tempora_schema.policies import file_part as policy_file_part
from tempora_schema.policies import policy_label

# ------------------------------------------------------------------------------ identity
#: Defaults of the tracer; a field that differs from its default shows in the file stem.
DEFAULT_BATCH_SIZE = 64
DEFAULT_SEED = 2025
DEFAULT_SEVERITY = 5
DEFAULT_STREAM = "episodic"
#: ``weights`` of an untrained (randomly initialised) model.
WEIGHTS_RANDOM = "random"
#: ``weights`` of a schema-v1 trace read in memory: v1 did not record the weights.
WEIGHTS_UNKNOWN = "unknown"

#: Metadata keys that make up a trace's comparison group: traces that agree on all of them
#: were measured under the same conditions and share one λ. The trace identity is the group
#: plus ``method``.
GROUP_KEYS = (
    "dataset",
    "model",
    "weights",
    "device",
    "threads",
    "batch_size",
    "seed",
    "stream",
    "severity",
    "domains",
    "max_batches",
)
#: ``policy`` (a sparse-adaptation policy, :mod:`.policies`) is optional: absent means every batch.
IDENTITY_KEYS = ("method", "policy") + GROUP_KEYS


@dataclass(frozen=True)
class GroupKey:
    """What makes traces comparable: same data, model and weights, same machine settings.

    ``threads``, ``max_batches`` and ``severity`` may be ``None`` (v1 traces: not recorded;
    ``severity``: datasets without severities); ``weights`` is ``"random"``,
    ``"sha256:<hex>"`` or, for v1 traces, ``"unknown"``.
    """

    dataset: str
    model: str
    weights: str
    device: str
    threads: int | None
    batch_size: int
    seed: int
    stream: str
    severity: int | None
    domains: tuple[str, ...]
    max_batches: int | None

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any]) -> "GroupKey":
        values = {k: meta[k] for k in GROUP_KEYS}
        values["domains"] = tuple(values["domains"])
        return cls(**values)

    def as_metadata(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in GROUP_KEYS}
        out["domains"] = list(self.domains)
        return out

    def label(self, seed: bool = True) -> str:
        """Compact one-line name: the v1 fields, then whatever else sets this group apart.

        ``seed=False`` names the setting the group's seeds replicate (seeds pool like episodes)."""
        parts = [self.dataset, self.model, self.device, f"bs{self.batch_size}"]
        parts += [f"seed{self.seed}", self.stream] if seed else [self.stream]
        if self.severity is not None:
            parts.append(f"sev{self.severity}")
        if len(self.domains) <= 2:
            parts.append("+".join(self.domains))
        else:
            parts.append(f"{len(self.domains)} domains")
        if self.max_batches is not None:
            parts.append(f"max{self.max_batches}")
        if self.threads is not None:
            parts.append(f"{self.threads}thr")
        parts.append("weights " + (self.weights[7:19] if self.weights.startswith("sha256:") else self.weights))
        return "/".join(parts)


@dataclass(frozen=True)
class TraceIdentity:
    """One trace's identity: its method, its sparse-adaptation policy (None: adapt on every
    batch; :mod:`.policies`) and its group (docs/reference/trace-schema.md, "Identity").

    ``method_source`` is the provenance of a method that is not built in (metadata key
    ``method_source``: the distribution's name and version, or the file's path and SHA-256), as
    sorted ``(key, value)`` pairs; ``None`` for a built-in method, whose identity is its name."""

    method: str
    group: GroupKey
    policy: str | None = None
    method_source: tuple[tuple[str, str], ...] | None = None

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any]) -> "TraceIdentity":
        source = meta.get(METHOD_SOURCE_KEY)
        pairs = tuple(sorted((str(k), str(v)) for k, v in source.items())) if isinstance(source, Mapping) else None
        return cls(str(meta["method"]), GroupKey.from_metadata(meta), meta.get("policy"), pairs)

    def as_metadata(self) -> dict[str, Any]:
        """The identity's metadata keys; ``policy`` and ``method_source`` only when the trace has
        them, so a trace of a built-in method without a policy carries exactly the keys it always did."""
        out = {"method": self.method, **({"policy": self.policy} if self.policy else {}), **self.group.as_metadata()}
        if self.method_source is not None:
            out[METHOD_SOURCE_KEY] = dict(self.method_source)
        return out

    def file_stem(self) -> str:
        """The trace's default file name without ``.parquet`` (see :func:`file_stem`)."""
        g = self.group
        return file_stem(policy_file_label(self.method, self.policy), g.batch_size, g.seed, g.severity, g.stream)

    def differences(self, other: "TraceIdentity") -> list[str]:
        """Identity keys on which the two differ (for the resume check's message)."""
        a, b = self.as_metadata(), other.as_metadata()
        return [k for k in (*IDENTITY_KEYS, METHOD_SOURCE_KEY) if a.get(k) != b.get(k)]


def method_label(method: str, method_params: Mapping[str, Any] | None, policy: str | None = None) -> str:
    """The method as traces of one group tell it apart: ``tent``, ``tent-paper`` for a trace
    taken with ``profile=paper`` (the reference code's behaviour, docs/results/methods-parity.md), so a
    default and a paper-profile trace of one method can sit side by side, and ``tent@every:4``
    for a trace taken under a sparse-adaptation policy (:mod:`.policies`)."""
    profile = (method_params or {}).get("profile", "default") if isinstance(method_params, Mapping) else "default"
    name = method if profile in (None, "default") else f"{method}-{profile}"
    return policy_label(name, policy if isinstance(policy, str) else None)


def policy_file_label(method: str, policy: str | None) -> str:
    """A method label as part of a file name: ``tent@every4`` (no colons)."""
    return method if not policy else policy_label(method, policy_file_part(policy))


def file_stem(method: str, batch_size: int, seed: int, severity: int | None, stream: str) -> str:
    """``<method>`` plus ``-bs<B>``, ``-seed<S>``, ``-sev<k>``, ``-continual`` where they differ
    from the defaults, so the common variants never share a file. The other identity fields
    live in the folder (device) or only in the metadata; a file of another identity is never
    silently overwritten (the tracer refuses an existing file, and a resume whose identity
    differs)."""
    stem = method
    if batch_size != DEFAULT_BATCH_SIZE:
        stem += f"-bs{batch_size}"
    if seed != DEFAULT_SEED:
        stem += f"-seed{seed}"
    if severity is not None and severity != DEFAULT_SEVERITY:
        stem += f"-sev{severity}"
    if stream != DEFAULT_STREAM:
        stem += f"-{stream.replace(':', '')}"
    return stem


def weights_identity(path: str | os.PathLike | None) -> str:
    """``"sha256:<hex>"`` of a weights file, or ``"random"`` for ``None`` (untrained model)."""
    if path is None:
        return WEIGHTS_RANDOM
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()
