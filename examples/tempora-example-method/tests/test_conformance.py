"""The method keeps the contract every Tempora method keeps with the tracer (Tempora's
conformance kit), and is found through its entry point once the distribution is installed."""

from __future__ import annotations

import torch
from tempora_trace.methods import MethodContext, resolve_method
from tempora_trace.methods.testing import assert_conforms, demo_batches, demo_model

from tempora_example_method import PseudoLabel


def test_conforms_to_the_tracer_contract():
    assert_conforms(PseudoLabel, batches=4, batch_size=16)


def test_found_through_the_entry_point():
    ref = resolve_method("pseudo-label")
    assert ref.cls is PseudoLabel
    assert ref.source.distribution == "tempora-example-method"


def test_learns_only_from_confident_samples():
    context = MethodContext(num_classes=10, dataset_family="cifar", batch_size=16)
    x = demo_batches(1, 16)[0]
    everything = PseudoLabel(demo_model("bn"), context, e_margin=100.0)
    nothing = PseudoLabel(demo_model("bn"), context, e_margin=0.0)
    before = {n: p.detach().clone() for n, p in everything.adapted}
    for method in (everything, nothing):
        method.predict(x)
        method.adapt()
    assert everything.last_updated and not nothing.last_updated
    assert any(not torch.equal(before[n], p) for n, p in everything.adapted)
