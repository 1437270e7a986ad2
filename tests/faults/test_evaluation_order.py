"""Fault suite: a lazy value never sees an in-place write made after it was defined (PyTorch's evaluation order).

``s = a.sum(); a.assign(a * 10).realize(); s.item()`` gave the sum of the new contents (40) instead of the old (4):
a training loop printing ``loss`` after ``opt.step()`` printed the post-step loss. Views are different: like a
PyTorch view, ``a[0:2]`` aliases the buffer and sees the write.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinycore import nn
from tinycore.engine.jit import TinyJit
from tinycore.tensor import Tensor


def _buf(values) -> Tensor:
    return Tensor(np.array(values, dtype=np.float32)).contiguous().realize()


def test_the_issue_reproduction():
    a = Tensor.ones(4).contiguous().realize()
    s = a.sum()
    a.assign(a * 10).realize()
    assert s.item() == 4.0
    assert a.numpy().tolist() == [10.0] * 4


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a.sum(),
        lambda a: a * 2,
        lambda a: (a[1:3] + 1).exp(),
        lambda a: a.max(),
        lambda a: a.reshape(2, 2).transpose() @ a.reshape(2, 2),
        lambda a: a.cast("int32"),
        lambda a: a.flip(0).contiguous(),
    ],
    ids=["sum", "mul", "view_then_compute", "max", "matmul", "cast", "contiguous"],
)
def test_lazy_values_keep_the_old_contents(make):
    data = [1.0, 2.0, 3.0, 4.0]
    a = _buf(data)
    lazy = make(a)
    expect = make(_buf(data)).numpy()
    a.assign(a * 10 - 1).realize()
    np.testing.assert_allclose(lazy.numpy(), expect)
    np.testing.assert_allclose(a.numpy(), np.array(data, dtype=np.float32) * 10 - 1)


def test_views_alias_the_buffer_like_pytorch():
    a, ref = _buf([1.0, 2.0, 3.0, 4.0]), torch.tensor([1.0, 2.0, 3.0, 4.0])
    view, ref_view = a[0:2], ref[0:2]
    reshaped, ref_reshaped = a.reshape(2, 2), ref.reshape(2, 2)
    same, ref_same = a.contiguous(), ref.contiguous()  # already contiguous: the tensor itself in PyTorch too
    a.assign(a * 10).realize()
    ref.mul_(10)
    np.testing.assert_allclose(same.numpy(), ref_same.numpy())
    np.testing.assert_allclose(view.numpy(), ref_view.numpy())
    np.testing.assert_allclose(reshaped.numpy(), ref_reshaped.numpy())


def test_in_place_operator_and_unrealized_assign():
    a = _buf([1.0, 2.0])
    s = a.sum()
    a += 1
    assert s.item() == 3.0  # read while the write is still pending
    assert a.numpy().tolist() == [2.0, 3.0]
    b = _buf([1.0, 2.0])
    t = b.sum()
    b.assign(b * 3)
    b.realize()
    assert t.item() == 3.0


def test_values_defined_after_the_write_see_it():
    a = _buf([1.0, 2.0])
    a.assign(a * 10)
    after = a.sum()
    assert after.item() == 30.0
    a.realize()
    assert a.sum().item() == 30.0


def test_two_tensors_with_one_graph_both_keep_the_old_value():
    a = _buf([1.0, 2.0, 3.0])
    x, y = a.sum(), a.sum()
    a.assign(a + 1).realize()
    assert (x.item(), y.item()) == (6.0, 6.0)


def test_repeated_writes_each_keep_their_own_snapshot():
    a = _buf([1.0])
    snaps = []
    for _ in range(4):
        snaps.append(a * 1)
        a.assign(a * 2).realize()
    assert [s.item() for s in snaps] == [1.0, 2.0, 4.0, 8.0]


def _training_losses(jit: bool) -> tuple[list[float], list[float], np.ndarray]:
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((3, 8, 4), dtype=np.float32)
    ys = rng.standard_normal((3, 8, 2), dtype=np.float32)
    w0 = rng.standard_normal((4, 2), dtype=np.float32)
    w = Tensor(w0.copy()).contiguous().realize()
    w.requires_grad = True
    opt = nn.optim.SGD([w], lr=0.1)

    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    run = TinyJit(step) if jit else step
    with Tensor.train():
        ours = [run(Tensor(x), Tensor(y)).item() for x, y in zip(xs, ys)]
    tw = torch.tensor(w0.copy(), requires_grad=True)
    topt = torch.optim.SGD([tw], lr=0.1)
    theirs = []
    for x, y in zip(xs, ys):
        topt.zero_grad()
        loss = ((torch.tensor(x) @ tw - torch.tensor(y)) ** 2).mean()
        loss.backward()
        topt.step()
        theirs.append(loss.item())
    return ours, theirs, w.numpy() - tw.detach().numpy()


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "tinyjit"])
def test_loss_read_after_the_optimizer_step_is_the_pre_step_loss(jit):
    ours, theirs, diff = _training_losses(jit)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)
    assert np.abs(diff).max() < 1e-5


def test_gradient_read_after_the_step_is_the_one_the_step_used():
    w0 = np.array([[1.0, -2.0], [0.5, 3.0]], dtype=np.float32)
    x = np.array([[1.0, 2.0], [3.0, -1.0]], dtype=np.float32)
    w = Tensor(w0.copy()).contiguous().realize()
    w.requires_grad = True
    opt = nn.optim.SGD([w], lr=0.5)
    with Tensor.train():
        (Tensor(x) @ w).square().sum().backward()
        opt.step()
    tw = torch.tensor(w0.copy(), requires_grad=True)
    (torch.tensor(x) @ tw).square().sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), (tw - 0.5 * tw.grad).detach().numpy(), rtol=1e-6)


def test_a_value_made_before_a_tinyjit_capture_keeps_its_value_over_replays():
    w = _buf([1.0, 2.0, 3.0])
    before = (w * 2).sum()

    @TinyJit
    def step(x: Tensor) -> Tensor:
        loss = (w * x).sum()
        w.assign(w - 0.1 * x).realize()
        return loss

    losses = [step(Tensor([1.0, 1.0, 1.0])).item() for _ in range(4)]
    np.testing.assert_allclose(losses, [6.0, 5.7, 5.4, 5.1], rtol=1e-5)
    assert before.item() == 12.0
    np.testing.assert_allclose(w.numpy(), [0.6, 1.6, 2.6], rtol=1e-5)


def test_a_pending_write_reading_another_buffer_reads_it_before_that_buffer_is_written():
    c = _buf([1.0, 2.0])
    t = _buf([0.0, 0.0])
    t.assign(c * 2)  # pending: t = 2 * (c as it is now)
    c.assign(c + 100).realize()
    assert t.numpy().tolist() == [2.0, 4.0]
    assert c.numpy().tolist() == [101.0, 102.0]


def test_a_realized_view_made_by_an_op_is_not_a_reader():
    a = _buf([1.0, 2.0, 3.0])
    r = (a + 1).realize()  # a buffer now: nothing to compute before the write
    a.assign(a * 0).realize()
    assert r.numpy().tolist() == [2.0, 3.0, 4.0]


def test_a_deferred_eager_chain_made_before_a_tinyjit_capture_keeps_its_value():
    from tinycore.frontend import tensor as tensor_module

    w = _buf([1.0, 2.0, 3.0])

    @TinyJit
    def step(x: Tensor) -> Tensor:
        loss = (w * x).sum()
        w.assign(w + x).realize()
        return loss

    ones = Tensor([1.0, 1.0, 1.0])
    losses = [step(ones).item()]  # the first call runs eagerly; the second captures
    for _ in range(3):  # warm: scalar ops on w then take the deferred eager path
        (w * 3.0 + 1.0).realize()
    before = w * 3.0 + 1.0  # made before the capture, read after the replays
    assert type(before._deferred) is tensor_module._DeferredOp
    losses += [step(ones).item() for _ in range(3)]
    np.testing.assert_allclose(losses, [6.0, 9.0, 12.0, 15.0], rtol=1e-6)
    np.testing.assert_allclose(before.numpy(), [7.0, 10.0, 13.0], rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), [5.0, 6.0, 7.0], rtol=1e-6)


# ----- an in-place write goes to the written tensor's own storage, never to a buffer it merely equals
# ``c = ones * 2; c.numpy(); d = ones * 2; d += 1`` made c 3: d's graph was the one c's realize computed, so the write
# went into c's buffer. Two models built from one seed in one process shared (and corrupted) their parameters the
# same way, and an optimizer step on lazily initialized parameters overwrote a buffer its own gradient still read.


@pytest.mark.parametrize("made_before_the_realize", [False, True])
def test_a_write_to_an_equal_lazy_value_leaves_the_realized_one_alone(made_before_the_realize):
    c = Tensor.ones(3) * 2
    d = Tensor.ones(3) * 2 if made_before_the_realize else None
    c.numpy()
    d = d if d is not None else Tensor.ones(3) * 2
    d += 1
    d.realize()
    assert c.numpy().tolist() == [2.0] * 3 and d.numpy().tolist() == [3.0] * 3
    assert (Tensor.ones(3) * 2).numpy().tolist() == [2.0] * 3  # the cached value of that graph is intact


def test_a_write_to_a_value_a_realize_computed_on_the_way_leaves_that_cache_alone():
    x = Tensor(np.arange(4, dtype=np.float32)).realize()
    h = x * 2
    assert (h.sum() + h.max()).item() == 18.0  # may keep h's buffer for reuse
    h2 = x * 2
    h2.assign(Tensor.zeros(4)).realize()
    assert (x * 2).numpy().tolist() == [0.0, 2.0, 4.0, 6.0] and h2.numpy().tolist() == [0.0] * 4


def test_two_models_from_one_seed_keep_their_own_parameters():
    def model() -> nn.Linear:
        Tensor.manual_seed(3)
        return nn.Linear(4, 2)

    first = model()
    before = first.weight.numpy().copy()
    second = model()
    opt = nn.optim.SGD([second.weight, second.bias], lr=0.5)
    second(Tensor.ones(1, 4)).sum().backward()
    opt.step()
    np.testing.assert_array_equal(first.weight.numpy(), before)
    assert not np.array_equal(second.weight.numpy(), before)


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_a_step_on_lazily_initialized_parameters_uses_the_gradient_torch_computes(optimizer):
    """Layers initialize their parameters with a pending write (an ASSIGN into their own buffer); the optimizer's
    step writes each buffer a second time in the same schedule. The first layer's gradient reads the second layer's
    initial weights, so it must run before that second write (it ran after it: conv -> relu -> linear gave a
    conv gradient 50% off, and Adam's first step moved 40 of 144 conv weights the wrong way)."""
    rng = np.random.default_rng(0)
    x = (rng.random((4, 1, 6, 6)) > 0.5).astype(np.float32)

    def model() -> tuple[nn.Conv2d, nn.Linear]:
        Tensor.manual_seed(0)
        return nn.Conv2d(1, 4, 3, padding=1), nn.Linear(4 * 36, 3)

    conv, fc = model()
    start = [p.numpy().copy() for p in (conv.weight, conv.bias, fc.weight, fc.bias)]
    conv, fc = model()  # the same initializers, pending again
    params = [conv.weight, conv.bias, fc.weight, fc.bias]
    opt = getattr(nn.optim, optimizer)(params, lr=1.0 if optimizer == "SGD" else 0.01)
    out = fc(conv(Tensor(x)).relu().flatten(1))
    (out * out).mean().backward()
    opt.step()  # the gradients were never realized: they are computed in the step's schedule
    tp = [torch.tensor(p, requires_grad=True) for p in start]
    h = torch.nn.functional.conv2d(torch.tensor(x), tp[0], tp[1], padding=1).relu().flatten(1)
    ((h @ tp[2].T + tp[3]) ** 2).mean().backward()
    for p, p0, t in zip(params, start, tp):
        if optimizer == "SGD":
            np.testing.assert_allclose(p0 - p.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-6)
        else:  # Adam's first step is lr * sign(g) wherever |g| >> eps
            big = np.abs(t.grad.numpy()) > 1e-4
            np.testing.assert_allclose((p0 - p.numpy())[big], 0.01 * np.sign(t.grad.numpy())[big], rtol=1e-3)
