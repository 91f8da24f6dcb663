"""Tuned functions called from ``torch.compile``d code, as framework engineers write it (the
"outside code" pass of 2026-12-04): real Triton kernels, under Triton's interpreter on the CPU and
compiled for the GPU on a CUDA machine (tensors made on ``DEVICE``, the default device), the
``eager`` and ``aot_eager`` backends (no compiler needed; ``inductor`` once, where a C++ compiler
is installed). The counts of host runs are the seed's eager schedule (``graphs=False``: ``W``
warm-up and ``R`` timed runs per config); graph mode, CUDA's default, has a test of its own.

What a caller may count on (README, "From torch.compile'd code"): TorchDynamo never traces a
tuner. A call of a tuned function (``autotune``'s face) or of a ``contextual_autotune``'d
function breaks the graph and runs as plain eager Python — its ``key_fn``, lookup, host function
and, on a miss, the tuning — so a miss tunes once, a hit costs what it costs outside compiled
code and adds no guard, and ``fullgraph=True`` fails with an error that names the fix (the call
as a ``torch.library.custom_op``), which works with ``fullgraph=True`` and ``dynamic=True``.
Inside a tuner, ``torch.compiler.is_compiling()`` is never true: that is how these tests see
that nothing of it was traced.

Under Triton's interpreter a kernel launch cannot be traced by Dynamo at all (it traces the
interpreter's NumPy code and fails on uint64 pointers); the tuned calls here run their kernels
only because the tuner's call is not traced.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from torch._dynamo.exc import Unsupported
from torch._dynamo.testing import CompileCounterWithBackend

from triton_dist.autotuner import contextual_autotune
from triton_dist.errors import TritonDistWarning
from triton_dist.tune import autotune

BACKENDS = ["eager", "aot_eager"]
W, R = 1, 2  # warm-up and timed runs per config: a tuning of two configs runs the host 2 * 3 + 1 times
TUNING_RUNS = 2 * (W + R) + 1
EAGER = {"graphs": False}  # the seed's schedule, whose host runs the counts above assume
_OPS = itertools.count()
#: a CUDA machine without the interpreter compiles the kernels for its GPU: the tensors live there
DEVICE = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
#: host calls of a tuning beyond its runs: on a device, the compile pass's compile-only calls (a
#: peek with the first config; then, where a kernel is not compiled yet, one per config)
COMPILE_CALLS = 0 if DEVICE == "cpu" else 1 + 2


def tuned(calls: int, keys: int = 1) -> bool:
    """Whether ``calls`` host calls are ``keys`` tunings, each with its compile pass's calls."""
    return keys * TUNING_RUNS <= calls <= keys * (TUNING_RUNS + COMPILE_CALLS)


def _reset_dynamo() -> None:
    with warnings.catch_warnings():  # torch 2.11's reset imports inductor, which warns of torch.jit
        warnings.simplefilter("ignore", DeprecationWarning)
        torch._dynamo.reset()


@pytest.fixture(autouse=True)
def _on_the_device(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Tensors made on ``DEVICE`` and measured by its backend; Dynamo's caches empty before and
    after (the frame counts below are this test's); contextual tuning logs into the test's
    directory."""
    monkeypatch.setenv("TRITON_DIST_DEVICE", DEVICE)
    monkeypatch.chdir(tmp_path)
    _reset_dynamo()
    torch.set_default_device(DEVICE)
    try:
        yield
    finally:
        torch.set_default_device(None)
        _reset_dynamo()


def cpu_kernels() -> None:
    """Skip the test unless its kernels can run: compiled for a GPU, or on CPU tensors under
    Triton's interpreter."""
    if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton kernels on CPU tensors need Triton's interpreter (TRITON_INTERPRET=1)")


@triton.jit
def _scale_kernel(x_ptr, y_ptr, alpha, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, alpha * tl.load(x_ptr + offsets, mask=mask), mask=mask)


def entries(root: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(root.rglob("*.json")) if p.parent.name != "_index"]


class Scale:
    """``scale(x, alpha)`` tuned over two block sizes, launching a real kernel; records every run
    of the host function and of ``key_fn`` with whether Dynamo was tracing it."""

    def __init__(self, blocks: tuple[int, ...] = (64, 128)) -> None:
        cpu_kernels()
        self.runs: list[int] = []
        self.traced: list[str] = []

        def key_fn(x: torch.Tensor, *args: Any, **kwargs: Any) -> tuple:
            if torch.compiler.is_compiling():
                self.traced.append("key_fn")
            return (tuple(x.shape), str(x.dtype))

        def scale(x: torch.Tensor, alpha: float, BLOCK: int) -> torch.Tensor:
            if torch.compiler.is_compiling():
                self.traced.append("host")
            self.runs.append(BLOCK)
            y = torch.empty_like(x)
            _scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, alpha, x.numel(), BLOCK=BLOCK)
            return y

        self.tuned = autotune([{"BLOCK": b} for b in blocks], key_fn=key_fn, n_warmup=W, n_repeat=R,
                              **EAGER)(scale)

    def took(self) -> int:
        """Host runs since the last look."""
        n, self.runs[:] = len(self.runs), []
        return n


def step(scale: Any):
    """Model code around the tuned call: torch ops before and after it."""
    def f(x: torch.Tensor) -> torch.Tensor:
        return scale(x + 1, 2.0) * 3

    return f


def no_recompile() -> Any:
    return torch.compiler.set_stance("fail_on_recompile")


# ----------------------------------------------------------------- autotune from compiled code

@pytest.mark.parametrize("backend", [*BACKENDS, pytest.param("inductor", marks=[
    pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None,
                       reason="inductor needs a C++ compiler"),
    pytest.mark.filterwarnings("ignore:.*torch.jit.script_method.*:DeprecationWarning")])])  # torch's own
def test_a_tuned_call_in_compiled_code_tunes_once_untraced_then_hits_without_recompiling(
        backend: str, cache_dir: Path) -> None:
    """Before: Dynamo traced the miss — dozens of the tuner's frames compiled one by one, the host
    function's up to the recompile limit (warnings), the candidates timed through compiled frames
    — and inlined the hit, tracing the host function into the graph (under the interpreter: an
    InterpreterError on the second call)."""
    s = Scale()
    counter = CompileCounterWithBackend(backend)
    f = torch.compile(step(s.tuned), backend=counter)
    x = torch.randn(1000)
    torch.testing.assert_close(f(x), (x + 1) * 6)
    assert tuned(s.took()) and len(entries(cache_dir)) == 1
    frames = counter.frame_count
    assert frames <= 2  # the torch ops before and after the call: the tuner compiled nothing
    with no_recompile():
        for _ in range(3):
            torch.testing.assert_close(f(x), (x + 1) * 6)
    assert s.took() == 3 and counter.frame_count == frames
    assert s.traced == []


@pytest.mark.skipif(DEVICE != "cuda", reason="graph mode (CUDA's default) needs a CUDA device")
@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_mode_in_compiled_code_tunes_as_outside_it(backend: str, cache_dir: Path) -> None:
    """CUDA's default schedule captures the host function in CUDA graphs: from compiled code (its
    call a graph break) it runs the host function as often as the same tuning outside compiled
    code, picks a config of the space, then hits without recompiling."""
    def make(runs: list[int]) -> Any:
        def scale(x: torch.Tensor, alpha: float, BLOCK: int) -> torch.Tensor:
            runs.append(BLOCK)
            y = torch.empty_like(x)
            _scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, alpha, x.numel(), BLOCK=BLOCK)
            return y
        return autotune([{"BLOCK": b} for b in (64, 128)], key_fn=lambda x, *a, **k: tuple(x.shape))(scale)

    x = torch.randn(1 << 16)
    make([]).tune(x + 1, 2.0, write_cache=False)  # compiles the kernels: the tunings below only peek
    alone: list[int] = []
    make(alone).tune(x + 1, 2.0, write_cache=False)  # the measurement alone, outside compiled code
    runs: list[int] = []
    tuned = make(runs)
    counter = CompileCounterWithBackend(backend)
    f = torch.compile(step(tuned), backend=counter)
    torch.testing.assert_close(f(x), (x + 1) * 6)
    # the measurement's host calls, as many as alone, then the call with the pick
    assert len(runs) == len(alone) + 1 > 5 and tuned.best_config(x) in ({"BLOCK": 64}, {"BLOCK": 128})
    assert len(entries(cache_dir)) == 1
    frames, runs[:] = counter.frame_count, []
    with no_recompile():
        for _ in range(3):
            torch.testing.assert_close(f(x), (x + 1) * 6)
    assert runs == [tuned.best_config(x)["BLOCK"]] * 3 and counter.frame_count == frames


@pytest.mark.parametrize("backend", BACKENDS)
def test_new_shapes_in_compiled_code_are_new_keys_tuned_once_each(backend: str, cache_dir: Path) -> None:
    """A new shape is a new key: tuned once, outside the graph. The tuner adds no guard: after
    Dynamo's own first recompile for a new shape (its graphs made dynamic), further shapes tune
    without any recompile."""
    s = Scale()
    counter = CompileCounterWithBackend(backend)
    f = torch.compile(step(s.tuned), backend=counter)
    for n in (1000, 2000):
        x = torch.randn(n)
        torch.testing.assert_close(f(x), (x + 1) * 6)
        assert tuned(s.took())
    with no_recompile():
        for n in (3000, 1000, 2000, 3000):
            x = torch.randn(n)
            torch.testing.assert_close(f(x), (x + 1) * 6)
    assert tuned(s.took() - 3) and len(entries(cache_dir)) == 3
    assert s.traced == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_shapes_compile_once_and_tune_each_key_once(backend: str) -> None:
    s = Scale()
    counter = CompileCounterWithBackend(backend)
    f = torch.compile(step(s.tuned), backend=counter, dynamic=True)
    x = torch.randn(1000)
    torch.testing.assert_close(f(x), (x + 1) * 6)
    frames = counter.frame_count
    with no_recompile():
        for n in (2000, 3000, 1000, 2000):
            x = torch.randn(n)
            torch.testing.assert_close(f(x), (x + 1) * 6)
    assert counter.frame_count == frames
    assert tuned(s.took() - 2, keys=3) and s.traced == []


def test_a_key_tuned_before_compiling_is_a_hit_in_compiled_code(cache_dir: Path) -> None:
    """Warm-up outside compiled code (or an entry on disk) then the compiled model: hits only."""
    s = Scale()
    x = torch.randn(1000)
    s.tuned(x + 1, 2.0)
    assert tuned(s.took())
    fresh = Scale()  # another process's tuner: the key comes from the disk
    for scale in (s, fresh):
        f = torch.compile(step(scale.tuned), backend="aot_eager")
        torch.testing.assert_close(f(x), (x + 1) * 6)
        assert scale.took() == 1 and scale.traced == []
    assert len(entries(cache_dir)) == 1


@pytest.mark.parametrize("how", ["face", "tuner"])
def test_compiling_the_tuned_function_itself_runs_it_eagerly(how: str) -> None:
    """``torch.compile(scale)`` (or of its AutoTuner): nothing to compile, the call runs as is."""
    s = Scale()
    f = torch.compile(s.tuned if how == "face" else s.tuned.tuner, backend="eager")
    x = torch.randn(1000)
    torch.testing.assert_close(f(x, 2.0), 2 * x)
    assert tuned(s.took())
    torch.testing.assert_close(f(x, 2.0), 2 * x)
    assert s.took() == 1
    assert s.traced == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_fullgraph_names_the_tuned_function_and_the_custom_op_fix(backend: str, cache_dir: Path) -> None:
    """``fullgraph=True`` cannot hold a tuned call (its config is picked at run time): before,
    Dynamo failed on a builtin deep in the tuner ("does not know how to trace the builtin
    `_thread.get_ident`"), naming neither the call nor a fix."""
    s = Scale()
    f = torch.compile(step(s.tuned), backend=backend, fullgraph=True)
    with pytest.raises(Unsupported) as caught:
        f(torch.randn(1000))
    message = str(caught.value)
    assert "triton_dist.tune.autotune" in message and "scale" in message
    assert "fullgraph=True" in message and "torch.library.custom_op" in message
    assert s.took() == 0 and entries(cache_dir) == []  # nothing ran, nothing was tuned


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_custom_op_fix_gives_one_graph_with_dynamic_shapes(backend: str, cache_dir: Path) -> None:
    """What the fullgraph error advises, as the README shows it: the tuned call as a custom op with
    a fake implementation. One graph, no recompile over shapes, each key tuned once at run time."""
    s = Scale()
    name = f"triton_dist_tests::scale_{next(_OPS)}"

    @torch.library.custom_op(name, mutates_args=())
    def scale_op(x: torch.Tensor, alpha: float) -> torch.Tensor:
        return s.tuned(x, alpha)

    @scale_op.register_fake
    def _(x: torch.Tensor, alpha: float) -> torch.Tensor:
        return torch.empty_like(x)

    counter = CompileCounterWithBackend(backend)
    f = torch.compile(step(scale_op), backend=counter, fullgraph=True, dynamic=True)
    x = torch.randn(1000)
    torch.testing.assert_close(f(x), (x + 1) * 6)
    assert counter.frame_count == 1
    with no_recompile():
        for n in (1000, 2000, 2000):
            x = torch.randn(n)
            torch.testing.assert_close(f(x), (x + 1) * 6)
    assert tuned(s.took() - 2, keys=2) and len(entries(cache_dir)) == 2 and s.traced == []


def test_importing_and_decorating_leave_dynamo_alone() -> None:
    """The marks are plain attributes and a flag on the tuners' own code: neither importing
    triton_dist nor decorating imports torch._dynamo."""
    script = textwrap.dedent("""
        import sys
        import torch
        from triton_dist.autotuner import contextual_autotune
        from triton_dist.tune import autotune
        autotune([{"c": 1}], key_fn=lambda x, *a, **k: x)(lambda x, c: x)
        contextual_autotune()(lambda x: x)
        print("torch._dynamo" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False"]


def test_without_dynamos_frame_strategies_only_the_graph_break_is_marked(monkeypatch: pytest.MonkeyPatch) -> None:
    """An older torch without ``set_code_exec_strategy``: the call still breaks the graph, and
    nothing fails at decoration (the README then says to wrap it in torch.compiler.disable)."""
    from torch._C._dynamo import eval_frame

    from triton_dist import _torch_compile

    monkeypatch.delattr(eval_frame, "set_code_exec_strategy")

    def fn() -> None:
        pass

    assert _torch_compile.skip_everything_in(fn.__code__) is False
    _torch_compile.opaque(fn, "why")
    assert fn.__dict__ == {"_torchdynamo_disable": True, "_torchdynamo_disable_msg": "why",
                           "_torchdynamo_disable_recursive": True}


def test_a_host_function_under_torch_compiler_disable_is_still_tuned_in_compiled_code(cache_dir: Path) -> None:
    """A host function the user wrapped in ``torch.compiler.disable`` (a way to keep a kernel out
    of Dynamo): ``functools.wraps`` copied its wrapper's chain to the bare host function onto the
    face, which torch versions whose ``innermost_fn`` does not check the wrapper id follow, so
    ``torch.compile(face)`` or ``torch.compiler.disable(face)`` called the host without the tuner.
    The face carries no such chain."""
    runs: list[float] = []

    @autotune([{"c": 1.0}, {"c": 2.0}], key_fn=lambda x, *a, **k: tuple(x.shape), n_warmup=W, n_repeat=R,
              **EAGER)
    @torch.compiler.disable
    def host(x: torch.Tensor, c: float) -> torch.Tensor:
        runs.append(c)
        return x * c

    assert "_torchdynamo_orig_callable" not in host.__dict__ and "_torchdynamo_wrapper_id" not in host.__dict__
    x = torch.randn(100)
    compiled = torch.compile(lambda x: host(x + 1) * 3, backend="aot_eager")
    torch.testing.assert_close(compiled(x), (x + 1) * 3 * host.best_config(x)["c"])
    torch.testing.assert_close(torch.compiler.disable(host)(x), x * host.best_config(x)["c"])
    assert tuned(len(runs) - 1) and len(entries(cache_dir)) == 1


# ----------------------------------------------------------------- contextual_autotune

def make_contextual(counts: Counter) -> tuple[Any, list[bool]]:
    """An outer function launching an inner ``@triton.autotune`` kernel (two configs)."""
    cpu_kernels()
    traced: list[bool] = []

    def hook(block: int) -> Any:
        def pre_hook(nargs: dict[str, Any]) -> None:
            counts[block] += 1
        return pre_hook

    kernel = triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=hook(b)) for b in (64, 128)],
                             key=["n"])(_scale_kernel)

    @contextual_autotune(n_repeat=R, n_warmup=W)
    def outer(x: torch.Tensor) -> torch.Tensor:
        traced.append(torch.compiler.is_compiling())
        y = torch.empty_like(x)
        n = x.numel()
        kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, 2.0, n)
        return y

    return outer, traced


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_contextual_tuned_call_in_compiled_code_runs_every_candidate_untraced(backend: str) -> None:
    """Before: Dynamo traced the outer function inside the contextual tuner's runs — a candidate
    launched once where three launches were due ({64: 1, 128: 4}), the tuner's frames compiled —
    and the next call failed in the interpreter."""
    counts, alone = Counter(), Counter()
    outer, traced = make_contextual(counts)
    reference, _ = make_contextual(alone)  # the same tuning outside compiled code
    x = torch.randn(1000)
    reference(x + 1)
    if DEVICE == "cpu":  # the CPU's schedule: W + R launches per config, then the kept run
        assert sorted(alone.values()) == [W + R, W + R + 1]
    counter = CompileCounterWithBackend(backend)
    f = torch.compile(step(lambda x, alpha: outer(x)), backend=counter, dynamic=True)
    torch.testing.assert_close(f(x), (x + 1) * 6)
    # the CPU's counts are its schedule's (which config gets the kept run is the timing's, in
    # either tuning); a GPU's follow its timings (runs per timed sample)
    if DEVICE == "cpu":
        assert sorted(counts.values()) == sorted(alone.values())
    else:
        assert min(counts.values()) >= W + R
    frames = counter.frame_count
    assert frames <= 2
    counts.clear()
    with no_recompile():
        for n in (1000, 2000):
            x = torch.randn(n)
            torch.testing.assert_close(f(x), (x + 1) * 6)
    if DEVICE == "cpu":  # a hit, then the new key tuned
        assert sum(counts.values()) == 1 + sum(alone.values())
    else:
        assert sum(counts.values()) >= 1 + 2 * (W + R) + 1
    assert counter.frame_count == frames and not any(traced)


def test_fullgraph_around_a_contextual_tuned_call_names_the_fix() -> None:
    """Before: "Unsupported context manager", from inside the contextual tuner."""
    counts: Counter = Counter()
    outer, traced = make_contextual(counts)
    f = torch.compile(step(lambda x, alpha: outer(x)), backend="eager", fullgraph=True)
    with pytest.raises(Unsupported) as caught:
        f(torch.randn(1000))
    message = str(caught.value)
    assert "contextual_autotune" in message and "torch.library.custom_op" in message
    assert not counts and not traced


# ----------------------------------------------------------------- grad and inference modes

@triton.jit
def _double_in_place(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, 2.0 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


def doubler() -> Any:
    """An in-place host function: a Triton kernel writing its argument (no version bump)."""
    cpu_kernels()
    @autotune([{"BLOCK": 64}, {"BLOCK": 128}], key_fn=lambda x, *a, **k: tuple(x.shape), n_warmup=W, n_repeat=R,
              **EAGER)
    def double(x: torch.Tensor, BLOCK: int) -> torch.Tensor:
        _double_in_place[(triton.cdiv(x.numel(), BLOCK),)](x, x.numel(), BLOCK=BLOCK)
        return x

    return double


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_tuning_under_no_grad_and_inference_mode_gives_the_right_result(mode: str) -> None:
    """Before: under ``inference_mode`` the in-place restore could not snapshot its arguments
    (inference tensors have no version counter): a warning on every tuning, and an in-place
    function's argument doubled in all 7 runs (x * 128 where x * 2 was due)."""
    s, double = Scale(), doubler()
    with getattr(torch, mode)():
        x = torch.randn(1000)  # an inference tensor under inference_mode
        torch.testing.assert_close(s.tuned(x, 2.0), 2 * x)
        y = x.clone()
        double(y)
        torch.testing.assert_close(y, 2 * x)
        y = x.clone()
        double(y)  # a hit
        torch.testing.assert_close(y, 2 * x)
        f = torch.compile(step(s.tuned), backend="aot_eager")
        torch.testing.assert_close(f(x), (x + 1) * 6)
    assert s.traced == []


def test_inference_tensors_tuned_outside_inference_mode_are_restored() -> None:
    """Tensors made under ``inference_mode`` and tuned on after it: a Triton kernel may write them
    (a torch op may not); the restore between runs writes them under inference mode."""
    double = doubler()
    with torch.inference_mode():
        x = torch.randn(1000)
        y = x.clone()
    double(y)
    torch.testing.assert_close(y, 2 * x)


def test_a_tuned_call_keeps_autograd_working_in_compiled_code() -> None:
    """Outside ``no_grad``: torch ops around the call still backpropagate (the tuned output has
    no grad_fn: the kernel writes it directly, as any Triton launch does)."""
    s = Scale()
    # (a tensor made in compiled code is made on the CPU whatever the default device)
    f = torch.compile(lambda w: (s.tuned(torch.randn(100, device=DEVICE), 2.0) * w).sum(), backend="aot_eager")
    w = torch.randn(100, requires_grad=True)
    f(w).backward()
    assert w.grad is not None and w.grad.shape == w.shape


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_contextual_tuning_under_no_grad_and_inference_mode_applies_an_in_place_kernel_once(mode: str) -> None:
    """An inner kernel updating its argument in place (``restore_value``), tuned inside the outer
    function's runs: the kept run's update only, with inference tensors too."""
    from tests.contextual import _kernels as K

    cpu_kernels()
    increment = K.make_increment((64, 128))

    @contextual_autotune(n_repeat=R, n_warmup=W)
    def bump(x: torch.Tensor) -> torch.Tensor:
        n = x.numel()
        increment[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, n)
        return x

    f = torch.compile(lambda x: bump(x) * 2, backend="aot_eager")
    with getattr(torch, mode)():
        x = torch.randn(1000)
        y = x.clone()
        torch.testing.assert_close(f(y), (x + 1) * 2)
        torch.testing.assert_close(y, x + 1)


# ----------------------------------------------------------------- tensors that hold no data

def torch_host() -> tuple[Any, list[str]]:
    """A host function of torch ops (which run on meta and fake tensors too)."""
    runs: list[str] = []

    @autotune([{"c": 1.0}, {"c": 2.0}], key_fn=lambda x, *a, **k: tuple(x.shape), n_warmup=W, n_repeat=R,
              **EAGER)
    def host(x: torch.Tensor, c: float) -> torch.Tensor:
        runs.append(x.device.type)
        return (x @ x.T).relu() * c

    return host, runs


NO_DATA = r"hold no data .* config_space\[0\] ran untuned, and nothing was cached"


@pytest.mark.parametrize("how", ["meta", "FakeTensorMode"])
def test_tensors_without_data_are_never_measured_nor_cached(how: str, cache_dir: Path) -> None:
    """Shape inference on the meta device or under FakeTensorMode (what torch.export without strict
    mode runs): before, the miss "measured" meta tensors and wrote the timings as the key's entry,
    which real calls of that shape then took from the disk in every process; under FakeTensorMode
    every candidate failed (NoValidConfigError: DataDependentOutputException: aten.equal)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    host, runs = torch_host()
    with pytest.warns(TritonDistWarning, match=NO_DATA):
        if how == "meta":
            out = host(torch.empty(64, 64, device="meta"))
        else:
            with FakeTensorMode():
                out = host(torch.empty(64, 64))
    assert out.shape == (64, 64) and len(runs) == 1  # config_space[0], once
    assert entries(cache_dir) == [] and host.best_config(torch.empty(64, 64)) is None
    runs.clear()
    x = torch.randn(64, 64)
    out = host(x)  # a real call of that key tunes
    torch.testing.assert_close(out, (x @ x.T).relu() * host.best_config(x)["c"])
    assert tuned(len(runs)) and len(entries(cache_dir)) == 1


def test_tune_refuses_tensors_without_data_and_writes_nothing(cache_dir: Path) -> None:
    """An explicit ``tune()`` (what campaigns call) on meta tensors would write its "timings" of
    nothing as the key's entry: it is refused, naming the fix, and the cache stays empty."""
    host, runs = torch_host()
    with pytest.raises(ValueError, match="hold no data.*real tensors"):
        host.tune(torch.empty(64, 64, device="meta"))
    assert runs == [] and entries(cache_dir) == [] and host.best_config(torch.empty(64, 64)) is None


def test_non_strict_export_of_a_kernel_call_ends_in_torchs_custom_op_advice(cache_dir: Path) -> None:
    """Before: every candidate failed on the fake tensors, a NoValidConfigError listing each."""
    s = Scale()

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return s.tuned(x, 2.0)

    with pytest.warns(TritonDistWarning, match=NO_DATA), pytest.raises(RuntimeError, match="custom op"):
        torch.export.export(Model(), (torch.randn(1000),), strict=False)
    assert entries(cache_dir) == [] and s.took() == 1
