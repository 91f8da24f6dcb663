"""A miss compiles its configs concurrently before measuring (issue 23; _measure/compile.py).

Real Triton kernels in the interpreter, real threads, real Triton cache files; only the compile
step is a stand-in (tests/unit/compile_standin.py), since the interpreter compiles nothing. The
tests that watch the stand-in's compiles need the interpreter (``needs_interpreter``); the
others (``compiler``) run with Triton's real compiler where it compiles for a GPU, as does every
tuning of the GPU tests (tests/gpu/).
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter

import pytest
import torch
import triton
import triton.language as tl

from tests.unit.compile_standin import compiler, standin  # noqa: F401 - the fixtures
from tests.unit.helpers import kernel_device, needs_interpreter
from triton_dist.autotuner import contextual_autotune
from triton_dist.errors import ConfigSpaceError, NoValidConfigError, SettingsError
from triton_dist.settings import get_settings, override
from triton_dist.tune import autotune


@triton.jit
def scale_kernel(x_ptr, y_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha, mask=mask)


BLOCKS = (16, 32, 64, 128, 256, 512)


def _key(x: torch.Tensor, alpha: float) -> tuple:
    return (x.numel(), str(x.dtype))


def _scale(x: torch.Tensor, alpha: float, BLOCK: int) -> torch.Tensor:
    y = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, alpha, x.numel(), BLOCK=BLOCK)
    return y


def _tuned(workers: int | None, blocks: tuple[int, ...] = BLOCKS, fn=_scale, **options):
    return autotune([{"BLOCK": b} for b in blocks], _key, n_warmup=1, n_repeat=2,
                    compile_workers=workers, **options)(fn)


def _failing_block(compiler) -> int:  # noqa: F811
    """A BLOCK whose compile fails on this machine: the stand-in is told to refuse 64; Triton's
    real compiler refuses 48 (``tl.arange`` needs a power of two), which the interpreter runs."""
    if compiler is not None:
        compiler.fail_when = {"BLOCK": 64}
        return 64
    return 48


@needs_interpreter
@pytest.mark.parametrize("workers", [2, 4])
def test_pass_compiles_every_config_concurrently_before_the_first_launch(standin, workers, tmp_path) -> None:  # noqa: F811
    x = torch.randn(1000)
    y = _tuned(workers)(x, 2.0)

    assert torch.allclose(y, x * 2.0)
    assert standin.kinds() == ["warmup"] * len(BLOCKS)  # nothing compiled at a launch
    assert sorted(e.options["BLOCK"] for e in standin.events) == sorted(BLOCKS)
    assert 1 < standin.max_in_flight <= workers
    assert len({e.thread for e in standin.events} - {threading.get_ident()}) >= 2
    first_launch = min(t for t, _ in standin.launches)
    assert max(e.end for e in standin.events) <= first_launch
    # Triton's own cache holds every config, in its layout (a group file per kernel)
    groups = list((tmp_path / "triton-cache").glob("*/__grp__scale_kernel.json"))
    assert len(groups) == len(BLOCKS)


@needs_interpreter
def test_one_worker_compiles_each_config_at_its_first_launch(standin) -> None:  # noqa: F811
    x = torch.randn(1000)
    _tuned(1)(x, 2.0)
    assert standin.kinds() == ["launch"] * len(BLOCKS)
    assert standin.max_in_flight == 1


@needs_interpreter
def test_no_pass_on_the_cpu_unless_asked(standin) -> None:  # noqa: F811
    """The CPU compiles nothing: the default (None) runs no pass there; the environment
    variable only bounds the threads."""
    with override(TRITON_DIST_COMPILE_WORKERS="8"):
        _tuned(None)(torch.randn(100), 1.0)
    assert set(standin.kinds()) == {"launch"}


def test_a_compile_error_is_that_configs_failure_and_it_never_launches(compiler, cache_dir) -> None:  # noqa: F811
    bad = _failing_block(compiler)
    calls: Counter = Counter()

    def counted(x: torch.Tensor, alpha: float, BLOCK: int) -> torch.Tensor:
        calls[BLOCK] += 1
        return _scale(x, alpha, BLOCK)

    tuned = _tuned(4, (16, 32, bad, 128, 256, 512), fn=counted)
    x = torch.randn(1000, device=kernel_device())
    y = tuned(x, 3.0)
    assert torch.allclose(y, x * 3.0)
    assert tuned.best_config(x, 3.0)["BLOCK"] != bad
    assert calls[bad] == 1 and calls[16] > 1  # its compile-pass call only: never run to be measured
    if compiler is not None:
        assert all(opts["BLOCK"] != bad for _, opts in compiler.launches)
    log = next(cache_dir.rglob("*.log")).read_text()
    assert f"config 2 {{'BLOCK': {bad}}}: failed: compile error: CompilationError" in log
    assert "1 compile errors" in log


def test_a_host_function_that_cannot_take_part_compiles_at_its_first_launch(compiler, cache_dir) -> None:  # noqa: F811
    # a kernel object of its own: an earlier test's compiles of scale_kernel would make the pass
    # see its first config already compiled and skip the others (the shortcut of a later key)
    kernel = triton.jit(scale_kernel.fn)

    def checked(x: torch.Tensor, alpha: float, BLOCK: int) -> torch.Tensor:
        y = torch.full_like(x, float("nan"))
        kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, alpha, x.numel(), BLOCK=BLOCK)
        if BLOCK == 32 and y.isnan().any():  # reads what the kernel wrote: not in a compile pass
            raise ValueError("the kernel left NaN")
        return y

    # graphs=False: the host read above cannot be captured (a GPU's default would fall back to
    # eager runs with a warning); the compile pass is the subject
    tuned = _tuned(4, fn=checked, graphs=False)
    x = torch.randn(1000, device=kernel_device())
    assert torch.allclose(tuned(x, 2.0), x * 2.0)
    if compiler is not None:
        by_block = {e.options["BLOCK"]: e.kind for e in compiler.events}
        # its compile happened inside the pass's launch (before the host raised) — nothing lost
        assert by_block == {b: "warmup" for b in BLOCKS}
    log = next(cache_dir.rglob("*.log")).read_text()
    assert "1 eager (1: ValueError: the kernel left NaN)" in log
    assert "config 1 {'BLOCK': 32}:" in log and "failed" not in log.split("config 1 {'BLOCK': 32}:")[1].split("\n")[0]


def test_the_scope_leaves_triton_as_it_was_and_other_threads_alone(compiler) -> None:  # noqa: F811
    # the stand-in under the interpreter, the real compiler on a GPU: the scope is the same
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    from triton_dist._measure import compile as comp

    before = {cls: cls.__dict__.get("run") for cls in (JITFunction, Autotuner, InterpretedFunction)}
    seen: list[torch.Tensor] = []
    x = torch.randn(256, device=kernel_device())

    def other_thread_launch() -> None:  # runs while the pass is active: a real launch
        seen.append(_scale(x, 5.0, BLOCK=64))

    def host(i: int) -> None:
        if i == 0:
            t = threading.Thread(target=other_thread_launch)
            t.start()
            t.join()
        _scale(x, 1.0, BLOCK=16 << i)  # powers of two: a real compiler refuses others (tl.arange)

    result = comp.compile_pass([(i, lambda i=i: host(i)) for i in range(3)], 3, _backend())
    assert sorted(result.compiled) == [0, 1, 2] and not result.failed and not result.eager
    assert all(n == 1 for n in result.compiled.values())  # one kernel each, found or compiled
    assert torch.allclose(seen[0], x * 5.0)
    assert {cls: cls.__dict__.get("run") for cls in before} == before


def _backend():
    from triton_dist._backends import get_backend

    return get_backend()


def test_an_inner_autotuned_kernel_compiles_its_configs_and_keeps_its_cache(compiler) -> None:  # noqa: F811
    inner = triton.autotune([triton.Config({"BLOCK": b}) for b in (32, 64, 128)], key=["n"])(
        triton.jit(scale_kernel.fn))

    def host(x: torch.Tensor, alpha: float, WIDTH: int) -> torch.Tensor:
        y = torch.empty_like(x)
        inner[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, alpha * WIDTH / WIDTH, x.numel())
        return y

    from triton_dist._measure import compile as comp

    x = torch.randn(500, device=kernel_device())
    result = comp.compile_pass([(0, lambda: host(x, 1.0, 1)), (1, lambda: host(x, 1.0, 2))], 2, _backend())
    # both calls compile what the inner kernel's real run will launch, its 3 configs (Triton has
    # no in-flight de-duplication: two threads may compile one specialisation at the same time)
    assert result.compiled == {0: 3, 1: 3} and not result.failed and not result.eager
    if compiler is not None:
        assert {e.options["BLOCK"] for e in compiler.events} == {32, 64, 128}
        assert set(compiler.kinds()) == {"warmup"}
    assert inner.cache == {}  # no pick from launches that only compiled


def test_compile_workers_is_validated() -> None:
    with pytest.raises(ConfigSpaceError, match="compile_workers"):
        autotune([{"BLOCK": 16}], _key, compile_workers=0)(_scale)
    with pytest.raises(ValueError, match="compile_workers"):
        contextual_autotune(compile_workers=0)
    with (override(TRITON_DIST_COMPILE_WORKERS="many"),
          pytest.raises(SettingsError, match="TRITON_DIST_COMPILE_WORKERS")):
        get_settings()
    with override(TRITON_DIST_COMPILE_WORKERS="3"):
        assert get_settings().compile_workers == 3
    assert get_settings().compile_workers >= 1


def test_the_default_workers_are_shared_by_the_ranks_of_a_node(monkeypatch) -> None:
    """torchrun's LOCAL_WORLD_SIZE: each rank compiles in its own children, on its share of the CPUs."""
    import os

    from triton_dist.settings import MAX_DEFAULT_COMPILE_WORKERS, default_compile_workers

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert default_compile_workers("") == MAX_DEFAULT_COMPILE_WORKERS  # 64 CPUs, one process
    assert default_compile_workers("8") == 8
    assert default_compile_workers("128") == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert default_compile_workers() == 16 and get_settings().compile_workers == 16
    # a rank pinned to its own CPUs already has only its share
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert default_compile_workers() == 16


def test_contextual_precompiles_the_inner_kernels_configs(compiler, tmp_path, monkeypatch) -> None:  # noqa: F811
    monkeypatch.chdir(tmp_path)
    bad = _failing_block(compiler)
    inner = triton.autotune([triton.Config({"BLOCK": b}) for b in (16, 32, bad, 128)], key=["n"])(
        triton.jit(scale_kernel.fn))

    @contextual_autotune(n_repeat=2, n_warmup=1, compile_workers=4)
    def run(x: torch.Tensor, alpha: float) -> torch.Tensor:
        y = torch.empty_like(x)
        inner[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, alpha, x.numel())
        return y

    x = torch.randn(700, device=kernel_device())
    assert torch.allclose(run(x, 4.0), x * 4.0)
    if compiler is not None:
        warm = [e for e in compiler.events if e.kind == "warmup"]
        assert sorted(e.options["BLOCK"] for e in warm) == [16, 32, 128]  # 64 failed to compile
        assert compiler.kinds().count("launch") == 0
        assert compiler.max_in_flight > 1
        assert all(opts["BLOCK"] != 64 for _, opts in compiler.launches)
        assert max(e.end for e in warm) <= min(t for t, _ in compiler.launches)
    log = (tmp_path / ".autotune_logs" / "rank-0.log").read_text()
    assert "config-id: 2 | compile error: CompilationError" in log
    assert not re.search(r"config-id: 2 \|.*measure-iter", log)  # never launched
    assert re.search(r"config-id: 2 \|.*invalid: compile error", log)
    # as stock Autotuner records a config that does not compile
    timings = {c.kwargs["BLOCK"]: t for c, t in inner.configs_timings.items()}
    assert timings[bad] == [math.inf] * 3 and all(math.isfinite(timings[b][0]) for b in (16, 32, 128))
    assert list(inner.cache.values())[0].kwargs["BLOCK"] != bad


def test_contextual_precompile_where_no_config_compiles_is_no_valid_config(compiler, tmp_path,  # noqa: F811
                                                                            monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    bad = _failing_block(compiler)
    inner = triton.autotune([triton.Config({"BLOCK": bad}, num_warps=w) for w in (2, 4)], key=["n"])(
        triton.jit(scale_kernel.fn))

    @contextual_autotune(n_repeat=2, n_warmup=1, compile_workers=2)
    def run(x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        inner[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, 2.0, x.numel())
        return y

    with pytest.raises(NoValidConfigError):
        run(torch.randn(700, device=kernel_device()))
    log = (tmp_path / ".autotune_logs" / "rank-0.log").read_text()
    assert log.count("| compile error: CompilationError") == 2
    assert "every candidate failed to compile: no valid config" in log
    if compiler is not None:
        assert compiler.kinds().count("launch") == 0  # nothing was launched
