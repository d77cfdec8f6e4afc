"""NEO: the classifier sees features centred on the running mean of everything seen so far."""

from __future__ import annotations

import torch

from helpers.methods import (
    batches,
    check_frozen_changes_nothing,
    check_gradient_free,
    check_hparams,
    check_reset_bit_identical,
    check_snapshot_restore,
    check_updated_flag,
    context,
    run_stream,
    tiny_model,
)
from tempora_trace.methods import get_method


def make(norm: str = "bn"):
    return get_method("neo")(tiny_model(norm), context(norm=norm))


def raw_features(model, x):
    """Penultimate features of the untouched model (independent of NEO's hook)."""
    seen = []
    h = model.fc.register_forward_hook(lambda m, inp, out: seen.append(inp[0].detach().clone()))
    with torch.no_grad():
        model(x)
    h.remove()
    return seen[0]


def test_classifier_input_is_centred_on_cumulative_mean():
    reference = tiny_model()
    method = make()
    xs = batches(4, batch_size=8)
    # the stream gets a constant offset, as a domain shift would
    xs = [(x * 0.5 + 0.3) for x in xs]
    seen = []
    h = method.model.fc.register_forward_hook(lambda m, inp, out: seen.append(inp[0].clone()))
    outs = run_stream(method, xs)
    h.remove()

    all_raw = []
    for i, x in enumerate(xs):
        raw = raw_features(reference, x)
        all_raw.append(raw)
        mean_so_far = torch.cat(all_raw).mean(0)  # plain oracle: mean over every sample seen, current included
        torch.testing.assert_close(seen[i], raw - mean_so_far, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(outs[i], reference.fc(raw - mean_so_far), rtol=1e-5, atol=1e-5)
    # the first batch is centred exactly on its own mean
    torch.testing.assert_close(seen[0].mean(0), torch.zeros_like(seen[0][0]), atol=1e-6, rtol=0)
    assert method.sample_count == 4 * 8
    # and centring changes the predictions compared with the source model
    with torch.no_grad():
        assert not torch.allclose(outs[-1], reference(xs[-1]))


def test_frozen_centres_with_reached_mean_without_updating():
    method = make()
    xs = batches(3, batch_size=8)
    run_stream(method, xs[:2])
    mean = method.feature_mean.clone()
    frozen_out = check_frozen_changes_nothing(method, xs[2:], warmup=0)
    assert torch.equal(method.feature_mean, mean)
    ref = tiny_model()
    expected = ref.fc(raw_features(ref, xs[2]) - mean)
    torch.testing.assert_close(frozen_out[0], expected, rtol=1e-5, atol=1e-5)


def test_gradient_free_contract():
    # predict moves the running feature mean, which every later prediction uses: NEO reports that
    # update (as AdaBN does), so adapt is not required to report none
    check_gradient_free(make(), batches(3), adapt_reports_no_update=False)
    check_gradient_free(make("gn"), batches(2), adapt_reports_no_update=False)


def test_updated_means_the_running_mean_moved():
    method = make()
    xs = batches(2)
    method.predict(xs[0])
    method.adapt()
    assert method.last_updated is True and method.sample_count == xs[0].shape[0]
    method.freeze()
    method.predict(xs[1])
    method.adapt()
    assert method.last_updated is False and method.sample_count == xs[0].shape[0]
    check_updated_flag(make(), batches(3))


def test_reset_and_snapshot_are_bit_identical():
    check_reset_bit_identical(make(), batches(3))
    check_snapshot_restore(make(), batches(4))
    method = make()
    run_stream(method, batches(2))
    method.reset()
    assert method.sample_count == 0 and not method.feature_mean.any()


def test_hparams_recorded():
    hp = check_hparams(make())
    assert hp == {"profile": "default"}
