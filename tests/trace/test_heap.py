"""The heap policy (tempora_trace.heap): under ``steady`` an event takes no fresh pages from the
kernel once the warm-up has run, so its time does not depend on what else the process
allocated before it (the cause of traced and live CPU events disagreeing by 20–40 %)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tempora_trace.config import TraceConfig
from tempora_trace.errors import ConfigError
from tempora_trace.heap import HEAP_POLICIES, apply_heap_policy

# One process per policy: mallopt changes the whole process, so the test runs in a child.
# The events are demo-resnet's, adapting with Tent: activations of a few MiB each, above
# glibc's default mmap threshold. Between events the child allocates and frees blocks of
# other sizes, as a tracer or live runner does (scoring, held logits, snapshots): under the
# C library's adaptive defaults that history decides whether the next event reuses pages.
CHILD = textwrap.dedent(
    """
    import json, resource, sys
    from tempora_trace.heap import apply_heap_policy
    applied = apply_heap_policy(sys.argv[1])
    import torch
    torch.set_num_threads(1)
    from tempora_trace.methods import get_method
    from tempora_trace.methods.base import MethodContext
    from tempora_trace.models import get_model
    from tempora_trace.timing import DeviceClock, timed_event
    model, spec = get_model("demo-resnet", None, num_classes=10)
    ctx = MethodContext(num_classes=10, dataset_family="cifar", batch_size=64, device="cpu", model_name="demo-resnet", norm_kind=spec.norm)
    method = get_method("tent")(model, ctx)
    clock = DeviceClock(torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(64, 3, 32, 32, generator=gen) for _ in range(4)]
    faults = []
    for i in range(40):
        side = [torch.empty(int(2**17 * (1 + (i * 7) % 23))) for _ in range(3)]  # other work's blocks
        del side
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        timed_event(method, xs[i % 4], clock)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    print(json.dumps({"applied": applied, "faults": faults[10:]}))
    """
)


def _faults(policy: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, policy], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="the steady heap is set with glibc's mallopt, which only Linux has; elsewhere every run records the system heap",
)
def test_steady_heap_events_take_no_fresh_pages_after_the_warm_up():
    steady, system = _faults("steady"), _faults("system")
    assert steady["applied"] == "steady" and system["applied"] == "system"
    faulting = lambda counts: sum(1 for c in counts if c > 16)  # noqa: E731
    # under steady the events after the first ten reuse the pages of the one before; the heap
    # may still grow to a new high-water mark a few times (the blocks between events change
    # size), a few hundred pages each, and how often varies from run to run (0 to 4 of 30
    # seen). Under the C library's defaults the blocks allocated between events make about
    # half of them take hundreds to thousands of fresh pages (17,000-23,000 in all, against
    # 250-700 under steady): the regime that made traced and live times differ
    assert faulting(steady["faults"]) <= len(steady["faults"]) // 4, steady["faults"]
    assert faulting(system["faults"]) >= 6, system["faults"]
    assert 10 * sum(steady["faults"]) < sum(system["faults"]), (steady["faults"], system["faults"])


def test_heap_policy_is_checked_recorded_and_system_leaves_the_allocator_alone():
    assert HEAP_POLICIES == ("steady", "system")
    assert apply_heap_policy("system") == "system"
    with pytest.raises(ValueError):
        apply_heap_policy("jemalloc")
    with pytest.raises(ConfigError, match="--heap must be one of steady, system"):
        TraceConfig(method="standard", heap="fast").resolved()
    # the policy moves CPU times: a resumed run must have the same one
    assert TraceConfig(method="standard").resolved().identity()["heap"] == "steady"


@pytest.mark.usefixtures("tiny_models", "one_thread")
def test_a_trace_records_its_heap_policy_and_the_page_faults_of_its_events(tmp_path, cifar_c_root):
    import pyarrow.parquet as pq

    from helpers.cifar import tiny_cifar_args
    from tempora_schema import HEAP_FAULTS_KEY, HEAP_KEY, decode_metadata
    from tempora_trace.cli import main

    for policy in ("steady", "system"):
        out = tmp_path / policy
        assert main(["run", "--method", "tent", "--heap", policy, *tiny_cifar_args(str(cifar_c_root), str(out))]) == 0
        (path,) = out.glob("*.parquet")
        meta = decode_metadata(pq.read_schema(path), path)
        assert meta[HEAP_KEY] == (policy if sys.platform.startswith("linux") else "system")
        faults = meta[HEAP_FAULTS_KEY]
        # one count per main-pass event: 4 batches of fog
        assert faults["events"] == 4 and 0 <= faults["median"] <= faults["max"]
    # the policy is part of what --resume compares
    assert main(["run", "--method", "tent", "--heap", "bogus", *tiny_cifar_args(str(cifar_c_root), str(tmp_path / "x"))]) == 2
