"""Trace schema v2: the only contract shared by ``tempora_trace`` and ``tempora_sim``.

Defined in ``docs/reference/trace-schema.md``. It lives in its own tiny package so the simulator can
import it without pulling in torch, and the tracer checks what it writes against the same
rules the reader enforces. Nothing here imports torch; pyarrow is imported only by the
functions that build or take Arrow objects, so a reader that uses polars never loads it.

What is here: the column set, the metadata keys, the *trace identity* (one definition that
drives the file stem, the metadata, the tracer's ``--resume`` check and the simulator's
comparison groups), validation, reading of schema-v1 files, λ (:mod:`.provision`) and the
machine-speed probe.

Every name is importable from ``tempora_schema`` itself (the contract); the modules say where
each is defined: :mod:`.columns` (the columns, the metadata keys, the Arrow form),
:mod:`.identity` (the comparison group, the trace identity, the file stem) and
:mod:`.validation` (the rules a reader checks).
"""

from __future__ import annotations

from tempora_schema.columns import (  # noqa: F401  (re-exported)
    COLUMN_KINDS,
    COLUMN_TYPES,
    COLUMNS,
    DIRICHLET_PREFIX,
    HEAP_FAULTS_KEY,
    HEAP_KEY,
    MAX_LABEL_CHARS,
    METADATA_FIELDS,
    METADATA_FIELDS_V1,
    METADATA_KEY,
    METHOD_SOURCE_KEY,
    METHOD_SOURCE_KINDS,
    MIXED_DOMAIN,
    NO_CHECKPOINT,
    NULLABLE_COLUMNS,
    OPTIONAL_METADATA_FIELDS,
    PHASE_ADAPT,
    PHASE_FROZEN,
    PHASES,
    PROBE_NOT_MEASURED,
    READABLE_VERSIONS,
    ROUNDS_MARK,
    SCHEMA_VERSION,
    STREAMS,
    TRACE_STREAMS,
    UNRESET_STREAMS,
    arrow_schema,
    decode_metadata,
    encode_metadata,
    gradual_severities,
    is_stream,
    parse_metadata,
    resets_per_episode,
    stream_alpha,
    stream_base,
    stream_name,
    stream_rounds,
)
from tempora_schema.errors import TemporaError, TraceSchemaError  # noqa: F401  (re-exported: the package's own error)
from tempora_schema.identity import (  # noqa: F401  (re-exported)
    DEFAULT_BATCH_SIZE,
    DEFAULT_SEED,
    DEFAULT_SEVERITY,
    DEFAULT_STREAM,
    GROUP_KEYS,
    IDENTITY_KEYS,
    WEIGHTS_RANDOM,
    WEIGHTS_UNKNOWN,
    GroupKey,
    TraceIdentity,
    file_stem,
    method_label,
    policy_file_label,
    weights_identity,
)
from tempora_schema.policies import file_part as policy_file_part  # noqa: F401  (re-exported)
from tempora_schema.policies import parse_policy, policy_label, validate_policy_metadata  # noqa: F401  (re-exported)
from tempora_schema.prediction import (  # noqa: F401  (re-exported)
    KIND_KEY,
    KIND_PROFILE,
    PREDICTED_KEY,
    PROFILE_AUTO_KEY,
    PROFILE_BATCHES_KEY,
    check_kind_rows,
    validate_kind,
)
from tempora_schema.provision import LAMBDA_RULES, LAMBDA_SIGMAS, MAD_TO_SIGMA, lambda_ms  # noqa: F401  (re-exported)
from tempora_schema.validation import (  # noqa: F401  (re-exported; the private rules other modules of both stages use)
    _SHA256,
    PROBE_DRIFT_LIMIT,
    ProbeDrift,
    RowArrays,
    RowLayout,
    _arrow_kind_ok,
    _is_int,
    check_metadata_matches_rows,
    check_policy_rows,
    metadata_version,
    probe_drift,
    probe_median_ms,
    rows_from_arrow,
    trace_policy,
    upgrade_v1_metadata,
    v1_warning,
    validate_metadata,
    validate_method_source,
    validate_rows,
    validate_speed_probe,
    validate_table,
)
from tempora_schema.variability import (  # noqa: F401  (re-exported)
    IDLE_BLOCKS_KEY,
    VARIABILITY_KEY,
    check_variability_rows,
    idle_blocks,
    map_sample_events,
    sample_size,
    validate_variability,
)
from tempora_schema.vocabulary import CORRUPTIONS  # noqa: F401  (re-exported: the episodes of the paper's episodic stream)
