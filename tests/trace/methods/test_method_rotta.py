"""RoTTA against independent oracles: the memory bank against a plain-Python version of its
selection rule, robust BatchNorm against its formula, the timeliness weights, the update
schedule, the EMA teacher, and the module replacement."""

from __future__ import annotations

import math
import random

import pytest
import torch
import torch.nn as nn

from helpers.methods import batches, check_updated_flag, context, tiny_model
from tempora_trace.methods import get_method
from tempora_trace.methods.rotta import CategoryBalancedMemory, RobustBatchNorm, timeliness_weights

RoTTA = get_method("rotta")


def make(**params):
    torch.manual_seed(0)
    return RoTTA(tiny_model(), context(), **params)


# ---------------------------------------------------------------------- the memory bank
def reference_bank(stream, capacity, classes, lambda_t=1.0, lambda_u=1.0):
    """The selection rule as the paper states it, written flat: a list of [id, label,
    uncertainty, age] rows. Returns the bank (id, age) after each offer."""
    bank: list[list] = []
    out = []

    def score(age, u):
        return lambda_t / (1 + math.exp(-age / capacity)) + lambda_u * u / math.log(classes)

    for ident, (label, u) in enumerate(stream):
        of_label = [row for row in bank if row[1] == label]
        if len(of_label) < capacity / classes and len(bank) < capacity:
            admit = True
        else:
            if len(of_label) < capacity / classes:
                counts = {c: sum(1 for row in bank if row[1] == c) for c in range(classes)}
                top = max(counts.values())
                pool = [row for row in bank if counts[row[1]] == top]
            else:
                pool = of_label
            # the worst candidate; among equal scores the last in (class, insertion) order
            pool.sort(key=lambda row: (row[1], bank.index(row)))
            worst = None
            for row in pool:
                if worst is None or score(row[3], row[2]) >= score(worst[3], worst[2]):
                    worst = row
            admit = worst is None or score(worst[3], worst[2]) > score(0, u)
            if admit and worst is not None:
                bank.remove(worst)
        if admit:
            bank.append([ident, label, u, 0])
        for row in bank:
            row[3] += 1
        out.append(sorted((row[0], row[3]) for row in bank))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_memory_bank_follows_its_selection_rule(seed):
    rnd = random.Random(seed)
    capacity, classes = 8, 3
    # skewed labels (a class-imbalanced stream) and uncertainties in [0, ln C]
    stream = [(min(2, int(rnd.expovariate(1.5))), rnd.random() * math.log(classes)) for _ in range(300)]
    expected = reference_bank(stream, capacity, classes)
    bank = CategoryBalancedMemory(capacity, classes)
    for ident, (label, u) in enumerate(stream):
        bank.add(torch.tensor(float(ident)), label, u)
        got = sorted((int(e.data.item()), e.age) for entries in bank.classes for e in entries)
        assert got == expected[ident], ident
        assert len(bank) <= capacity
    data, ages = bank.contents()
    assert len(data) == len(ages) and all(0 < a <= 300 / capacity for a in ages)


def test_memory_bank_hand_worked():
    """Capacity 2, two classes (one slot each): a third class-0 sample replaces the stored one
    only if the stored one scores higher."""
    bank = CategoryBalancedMemory(2, 2, lambda_t=1.0, lambda_u=1.0)
    assert bank.add("a", 0, 0.5) and bank.add("b", 1, 0.1)
    # "a" has age 2 → 1/(1+e^-1) + 0.5/ln2 ≈ 1.4525; newcomer score 0.5 + 0.6/ln2 ≈ 1.3656: replaced
    assert bank.add("c", 0, 0.6)
    assert [[e.data for e in c] for c in bank.classes] == [["c"], ["b"]]
    # "c" (age 1) scores 1/(1+e^-0.5) + 0.6/ln2 ≈ 1.4881, below the newcomer's 0.5 + 0.69/ln2 ≈ 1.4955: the newcomer is dropped
    assert not bank.add("d", 0, 0.69)
    assert [[e.data for e in c] for c in bank.classes] == [["c"], ["b"]]


def test_timeliness_weights():
    ages = torch.tensor([0.0, 0.5, 1.0, 3.0])
    torch.testing.assert_close(timeliness_weights(ages), torch.sigmoid(-ages))
    assert timeliness_weights(torch.tensor([0.0])).item() == 0.5


# ---------------------------------------------------------------------- robust BatchNorm
def test_robust_batchnorm_moves_its_statistics_by_the_formula():
    torch.manual_seed(1)
    bn = nn.BatchNorm2d(4)
    bn.running_mean.copy_(torch.randn(4))
    bn.running_var.copy_(torch.rand(4) + 0.5)
    with torch.no_grad():
        bn.weight.copy_(torch.rand(4) + 0.5)
        bn.bias.copy_(torch.randn(4))
    rbn = RobustBatchNorm(bn, 0.05)
    x = torch.randn(6, 4, 5, 5) * 2 + 1
    mu0, var0 = bn.running_mean.clone(), bn.running_var.clone()
    rbn.train()
    out = rbn(x)
    mu_b = x.mean((0, 2, 3))
    var_b = ((x - mu_b.view(1, -1, 1, 1)) ** 2).mean((0, 2, 3))  # biased
    mu, var = 0.95 * mu0 + 0.05 * mu_b, 0.95 * var0 + 0.05 * var_b
    torch.testing.assert_close(rbn.mean, mu, rtol=0, atol=1e-6)
    torch.testing.assert_close(rbn.var, var, rtol=0, atol=1e-6)
    expected = (x - mu.view(1, -1, 1, 1)) / torch.sqrt(var.view(1, -1, 1, 1) + bn.eps) * bn.weight.view(1, -1, 1, 1) + bn.bias.view(
        1, -1, 1, 1
    )
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)
    # eval mode: the stored statistics, unchanged
    rbn.eval()
    stored = rbn.mean.clone()
    torch.testing.assert_close(rbn(x), expected, rtol=0, atol=1e-5)
    assert torch.equal(rbn.mean, stored)
    # gradients reach the input through the batch part of the statistics
    rbn.train()
    xg = x.clone().requires_grad_(True)
    rbn(xg).pow(2).sum().backward()
    assert xg.grad is not None and xg.grad.abs().sum() > 0


def test_robust_batchnorm_on_features():
    bn = nn.BatchNorm1d(3)
    rbn = RobustBatchNorm(bn, 0.5).train()
    x = torch.randn(8, 3)
    rbn(x)
    torch.testing.assert_close(rbn.mean, 0.5 * x.mean(0), rtol=0, atol=1e-6)


def test_every_batchnorm_is_replaced_in_student_and_teacher():
    method = make()
    for net in (method.model, method.teacher):
        assert not [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
        assert len([m for m in net.modules() if isinstance(m, RobustBatchNorm)]) == 2
    source = tiny_model()
    sources = [m for m in source.modules() if isinstance(m, nn.BatchNorm2d)]
    robust = [m for m in method.model.modules() if isinstance(m, RobustBatchNorm)]
    for bn, rbn in zip(sources, robust):
        assert torch.equal(bn.running_mean, rbn.mean) and torch.equal(bn.running_var, rbn.var)
    assert {n for n, _ in method.adapted} == {"layer1.1.weight", "layer1.1.bias", "layer2.1.weight", "layer2.1.bias"}
    assert isinstance(method.optimizer, torch.optim.Adam)


# ---------------------------------------------------------------------- the schedule and the teacher
def test_bank_updates_run_at_every_multiple_of_the_update_frequency():
    method = make(update_frequency=24, memory_size=16)
    counts = []
    for x in batches(4, batch_size=16):
        method.predict(x)
        method.adapt()
        counts.append(method.last_bank_updates)
        assert method.last_updated is True
    assert counts == [0, 1, 1, 0] and method.seen == 64  # samples 24 and 48


def test_prediction_is_the_teacher_in_eval_mode_and_the_teacher_follows_its_ema():
    nu = 0.2
    method = make(nu=nu, update_frequency=16, memory_size=16)
    x = batches(1, batch_size=16)[0]
    teacher_before = {n: p.detach().clone() for n, p in method.teacher.named_parameters()}
    with torch.no_grad():
        expected = method.teacher.eval()(x)
    torch.testing.assert_close(method.predict(x), expected, rtol=0, atol=0)
    method.adapt()
    assert method.last_bank_updates == 1
    student = dict(method.model.named_parameters())
    for name, t in method.teacher.named_parameters():
        torch.testing.assert_close(t.detach(), (1 - nu) * teacher_before[name] + nu * student[name].detach(), rtol=0, atol=1e-6)
    assert any(not torch.equal(student[n].detach(), teacher_before[n]) for n in ("layer1.1.weight", "layer2.1.bias"))


def test_updated_flag_and_frozen_mode():
    method = make(update_frequency=16, memory_size=16)
    assert check_updated_flag(method, batches(3)) == "batches reporting updated: 2 true, 0 false"
    method.freeze()
    seen = method.seen
    method.predict(batches(1)[0])
    method.adapt()
    assert method.last_updated is False and method.seen == seen
