"""contextual_autotune over a model's forward and over a whole training step, with inner
``@triton.autotune`` kernels in a ``torch.autograd.Function`` (forward and backward kernels), as
kernel libraries write them. Real Triton kernels under the interpreter.

The outer function runs several times in a call that tunes (README): its random draws are now
rewound between runs, so a forward with dropout gives what one untuned call gives; training
state that a run thrown away changes (an optimizer's step, ``.grad``, BatchNorm's statistics) is
named in a warning; and the documented way out (tune on a copy first) gives exactly one step.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from triton_dist.autotuner import contextual_autotune
from triton_dist.errors import TritonDistWarning


@pytest.fixture(autouse=True)
def in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # the log goes to ./.autotune_logs
    return tmp_path


@triton.jit
def _fwd(x_ptr, w_ptr, y_ptr, cols, n, BLOCK: tl.constexpr):
    """y = relu(x * w), w broadcast over rows."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    w = tl.load(w_ptr + offsets % cols, mask=mask, other=0.0)
    y = x * w
    tl.store(y_ptr + offsets, tl.where(y > 0, y, 0.0), mask=mask)


@triton.jit
def _bwd(dy_ptr, x_ptr, w_ptr, dx_ptr, dw_ptr, cols, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    w = tl.load(w_ptr + offsets % cols, mask=mask, other=0.0)
    g = tl.where(x * w > 0, tl.load(dy_ptr + offsets, mask=mask, other=0.0), 0.0)
    tl.store(dx_ptr + offsets, g * w, mask=mask)
    tl.atomic_add(dw_ptr + offsets % cols, g * x, mask=mask)


class Kernels:
    """Fresh autotuners (empty caches); ``blocks=(16,)``: one config, nothing to tune (the reference)."""

    def __init__(self, blocks: tuple[int, ...] = (16, 64)) -> None:
        configs = [triton.Config({"BLOCK": b}, num_warps=4) for b in blocks]
        self.fwd = triton.autotune(configs=configs, key=["n"])(_fwd)
        self.bwd = triton.autotune(configs=configs, key=["n"], reset_to_zero=["dw_ptr"])(_bwd)


class ScaleRelu(torch.autograd.Function):
    kernels = Kernels((16,))

    @staticmethod
    def forward(ctx, x, w):
        y, n = torch.empty_like(x), x.numel()
        ScaleRelu.kernels.fwd[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, w, y, w.numel(), n)
        ctx.save_for_backward(x, w)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dy, n = dy.contiguous(), x.numel()
        dx, dw = torch.empty_like(x), torch.zeros_like(w)
        ScaleRelu.kernels.bwd[lambda m: (triton.cdiv(n, m["BLOCK"]),)](dy, x, w, dx, dw, w.numel(), n)
        return dx, dw


class Model(torch.nn.Module):
    def __init__(self, batch_norm: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 24)
        self.w = torch.nn.Parameter(torch.randn(24))
        self.norm = torch.nn.BatchNorm1d(24) if batch_norm else torch.nn.Identity()
        self.drop = torch.nn.Dropout(dropout)
        self.out = torch.nn.Linear(24, 1)

    def forward(self, x):
        return self.out(self.drop(self.norm(ScaleRelu.apply(self.lin(x), self.w))))


def _setup(**model):
    torch.manual_seed(0)
    m = Model(**model)
    return m, torch.optim.Adam(m.parameters(), lr=1e-2), torch.randn(12, 8), torch.randn(12, 1)


def train_step(model, opt, x, target):
    loss = torch.nn.functional.mse_loss(model(x), target)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.detach()


def _state(model, opt):
    return ({k: v.clone() for k, v in model.state_dict().items()},
            [(s["step"].clone(), s["exp_avg"].clone(), s["exp_avg_sq"].clone()) for s in opt.state.values()])


def _assert_same_state(a, b) -> None:
    (params_a, adam_a), (params_b, adam_b) = a, b
    for name in params_a:
        assert torch.allclose(params_a[name].float(), params_b[name].float()), name
    assert len(adam_a) == len(adam_b)
    for sa, sb in zip(adam_a, adam_b, strict=True):
        assert all(torch.allclose(u, v) for u, v in zip(sa, sb, strict=True))


def _untuned(fn, **model):
    ScaleRelu.kernels = Kernels((16,))
    m, opt, x, t = _setup(**model)
    torch.manual_seed(5)
    return fn(m, opt, x, t), _state(m, opt), torch.get_rng_state()


def test_a_forward_with_dropout_gives_what_one_untuned_forward_gives() -> None:
    """The outer function's runs drew a new dropout mask each, and the kept run's was not the one an
    untuned call draws: the output and the generator after the call differed."""
    def forward(m, opt, x, t):
        return m(x)

    y0, _, rng0 = _untuned(forward, dropout=0.3)
    ScaleRelu.kernels = Kernels()
    m, opt, x, t = _setup(dropout=0.3)
    tuned = contextual_autotune(n_repeat=1, n_warmup=0)(forward)
    torch.manual_seed(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TritonDistWarning)  # no training state changes here
        y1 = tuned(m, opt, x, t)
    assert ScaleRelu.kernels.fwd.cache, "the forward kernel was not tuned"
    assert torch.allclose(y0, y1) and y1.grad_fn is not None
    assert torch.equal(rng0, torch.get_rng_state())


def test_a_whole_training_step_under_it_is_named_in_a_warning() -> None:
    """Each run stepped the optimizer and the kept run's loss was the Nth step's, silently."""
    ScaleRelu.kernels = Kernels()
    m, opt, x, t = _setup(batch_norm=True)
    tuned = contextual_autotune(n_repeat=1, n_warmup=0)(train_step)
    with pytest.warns(TritonDistWarning, match=r"run 1 of the outer function was thrown away") as said:
        tuned(m, opt, x, t)
    text = " ".join(str(w.message) for w in said if "thrown away" in str(w.message))
    assert "Adam.step() ran" in text and "BatchNorm1d.num_batches_tracked" in text
    assert "copy.deepcopy" in text
    with warnings.catch_warnings():  # the next call runs once: nothing to say
        warnings.simplefilter("error", TritonDistWarning)
        tuned(m, opt, x, t)


def _said(tuned, *args) -> str:
    """The side-effect warning's text of one call ("" when none)."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", TritonDistWarning)
        tuned(*args)
    return " ".join(str(w.message) for w in said if "thrown away" in str(w.message))


def test_batch_norms_running_statistics_are_named_in_training_mode_only() -> None:
    """BatchNorm's native kernel updates running_mean and running_var without a version-counter
    bump: the warning named num_batches_tracked alone. In eval mode nothing of it moves."""
    def forward(m, opt, x, t):
        return m(x)

    ScaleRelu.kernels = Kernels()
    m, opt, x, t = _setup(batch_norm=True)
    before = m.norm.running_mean.clone()
    text = _said(contextual_autotune(n_repeat=1, n_warmup=0)(forward), m, opt, x, t)
    assert not torch.equal(before, m.norm.running_mean)  # the statistics did move, once per run
    assert "BatchNorm1d.running_mean" in text and "BatchNorm1d.running_var" in text, text
    assert "BatchNorm1d.num_batches_tracked" in text and "step() ran" not in text

    ScaleRelu.kernels = Kernels()
    m, opt, x, t = _setup(batch_norm=True)
    m.eval()
    assert _said(contextual_autotune(n_repeat=1, n_warmup=0)(forward), m, opt, x, t) == ""


@pytest.mark.parametrize("set_to_none", [True, False])
def test_a_gradient_the_step_clears_first_is_not_named_one_it_accumulates_onto_is(set_to_none: bool) -> None:
    """A step that starts with zero_grad() rebuilds its gradients whole in every run, so re-running
    it is harmless: its .grad was named all the same. A step that accumulates onto the gradients
    it finds (no zero_grad) is named."""
    def clearing(m, opt, x, t):
        opt.zero_grad(set_to_none=set_to_none)
        loss = torch.nn.functional.mse_loss(m(x), t)
        loss.backward()
        return loss.detach()

    def accumulating(m, opt, x, t):
        loss = torch.nn.functional.mse_loss(m(x), t)
        loss.backward()
        return loss.detach()

    for grads_before in (False, True):  # a model that has no gradients yet, and one that has some
        ScaleRelu.kernels = Kernels((16,))
        m, opt, x, t = _setup()
        if grads_before:
            accumulating(m, opt, x, t)  # one untuned step: nonzero gradients left in place
        reference = copy.deepcopy(m)
        ScaleRelu.kernels = Kernels()
        tuned = contextual_autotune(n_repeat=1, n_warmup=0)(clearing)
        assert _said(tuned, m, opt, x, t) == ""
        assert ScaleRelu.kernels.fwd.cache and ScaleRelu.kernels.bwd.cache
        clearing(reference, torch.optim.Adam(reference.parameters(), lr=1e-2), x, t)  # one step's gradients
        for (name, p), q in zip(m.named_parameters(), reference.parameters(), strict=True):
            assert torch.allclose(p.grad, q.grad), name

    ScaleRelu.kernels = Kernels()
    m, opt, x, t = _setup()
    text = _said(contextual_autotune(n_repeat=1, n_warmup=0)(accumulating), m, opt, x, t)
    assert "Linear.weight.grad" in text and "step() ran" not in text, text


@pytest.mark.parametrize("cleared_by_caller", ["none", "zeros"])
def test_a_gradient_the_caller_cleared_is_named_when_the_one_run_thrown_away_accumulated_onto_it(
        cleared_by_caller: str) -> None:
    """The caller clears the gradients before the call (zero_grad() outside the decorated step,
    which runs backward without clearing): a .grad that was None or all zeros at its first look
    was taken for one the step cleared. Where only one run is thrown away (each kernel launched
    twice a run with one key: both configs' slots in run 1) the kept run accumulated onto that
    run's gradient, twice one step's, and nothing was said. A step that clears its gradients
    itself is still not named."""
    def twice(m, opt, x, t):
        loss = torch.nn.functional.mse_loss(m(x), t) + torch.nn.functional.mse_loss(m(x), t)
        loss.backward()
        return loss.detach()

    def clearing_twice(m, opt, x, t):
        opt.zero_grad(set_to_none=cleared_by_caller == "none")
        return twice(m, opt, x, t)

    def clear(m, opt):
        opt.zero_grad(set_to_none=cleared_by_caller == "none")
        if cleared_by_caller == "zeros":
            for p in m.parameters():
                p.grad = torch.zeros_like(p)

    ScaleRelu.kernels = Kernels()
    m, opt, x, t = _setup()
    clear(m, opt)
    text = _said(contextual_autotune(n_repeat=1, n_warmup=0)(twice), m, opt, x, t)
    assert "run 1 of the outer function was thrown away" in text and "Linear.weight.grad" in text, text
    assert "step() ran" not in text

    ScaleRelu.kernels = Kernels((16,))
    m, opt, x, t = _setup()
    twice(m, opt, x, t)  # gradients left in place, which the step clears itself
    ScaleRelu.kernels = Kernels()
    assert _said(contextual_autotune(n_repeat=1, n_warmup=0)(clearing_twice), m, opt, x, t) == ""


def test_tuning_on_a_copy_first_gives_exactly_one_training_step() -> None:
    """The way out the warning names: loss, parameters, BatchNorm statistics and Adam's state
    equal one untuned step's, with the backward kernel tuned too."""
    loss0, state0, rng0 = _untuned(train_step, batch_norm=True, dropout=0.2)
    ScaleRelu.kernels = Kernels()
    m, opt, x, t = _setup(batch_norm=True, dropout=0.2)
    tuned = contextual_autotune(n_repeat=1, n_warmup=0)(train_step)
    spare_m = copy.deepcopy(m)
    spare_opt = torch.optim.Adam(spare_m.parameters(), lr=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TritonDistWarning)
        tuned(spare_m, spare_opt, x, t)
    assert ScaleRelu.kernels.fwd.cache and ScaleRelu.kernels.bwd.cache
    torch.manual_seed(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TritonDistWarning)
        loss1 = tuned(m, opt, x, t)
    assert torch.allclose(loss0, loss1)
    _assert_same_state(state0, _state(m, opt))
    assert torch.equal(rng0, torch.get_rng_state())


def test_another_threads_training_during_the_call_is_not_named() -> None:
    """The watch's hooks are global: a model trained in another thread while a call tuned (an
    evaluation or EMA thread, a second job's step) was named in the call's warning as state its
    own run thrown away changed ('SGD.step() ran; updated in place: Linear.weight'), and its
    module calls filled the watch's table while the tuning thread read it. Only the tuning
    thread's modules and optimizers are looked at."""
    import threading

    ScaleRelu.kernels = Kernels()
    m, opt, x, t = _setup()
    other = torch.nn.Linear(4, 4)
    other_opt = torch.optim.SGD(other.parameters(), lr=0.1)
    go, done = threading.Event(), threading.Event()

    def elsewhere() -> None:  # started before the call, independent of it
        go.wait(30)
        other(torch.randn(2, 4)).sum().backward()
        other_opt.step()
        done.set()

    def forward(m, opt, x, t):
        y = m(x)
        if not go.is_set():  # the first run (thrown away, tuning): the other thread trains meanwhile
            go.set()
            assert done.wait(30)
        return y

    worker = threading.Thread(target=elsewhere)
    worker.start()
    tuned = contextual_autotune(n_repeat=1, n_warmup=0)(forward)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", TritonDistWarning)  # was: 'SGD.step() ran; ...'
            tuned(m, opt, x, t)
    finally:
        go.set()
        worker.join()
    assert ScaleRelu.kernels.fwd.cache, "the forward kernel was not tuned"


def test_the_watch_reads_no_gradients_values() -> None:
    """The side-effect watch tells a gradient the step accumulates onto from version counters only:
    a reduction of each ``.grad`` at its module's first call (``bool(grad.any())``, 3693a79) is, on a
    device, a sync per parameter between the launches being measured (a reviewer, 2026-12-05).
    A step that accumulates onto the gradients it finds is still named."""
    from torch.overrides import TorchFunctionMode

    def accumulating(m, opt, x, t):
        loss = torch.nn.functional.mse_loss(m(x), t)
        loss.backward()
        return loss.detach()

    ScaleRelu.kernels = Kernels((16,))
    m, opt, x, t = _setup()
    accumulating(m, opt, x, t)  # nonzero gradients in place before the call
    grads = [p.grad for p in m.parameters()]
    read: list[str] = []

    class Reads(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if args and any(args[0] is g for g in grads):
                read.append(getattr(func, "__name__", repr(func)))
            return func(*args, **(kwargs or {}))

    ScaleRelu.kernels = Kernels()
    tuned = contextual_autotune(n_repeat=1, n_warmup=0)(accumulating)
    with Reads():
        text = _said(tuned, m, opt, x, t)
    assert "Linear.weight.grad" in text, text
    assert not {"any", "__bool__", "item", "tolist", "all", "nonzero"} & set(read), read
