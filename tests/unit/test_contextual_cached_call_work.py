"""What a ``contextual_autotune``'d call whose inner kernels are all cached does: as little as it
can, since a training loop makes one every step. Today's changes (the generator state taken on
every call, the side-effect watch) made such a call ~4 µs dearer than before them on this CPU
(~16.5 µs over the undecorated function before, ~20.5 µs after): it read the settings twice (the
backend's, then the agreement timeout that only ``is_dist`` uses, each read ~2 µs with its
environment stamp) and built a side-effect watch it never started. Counted here, not timed: the
settings are read once, no watch is made, and the generator is still taken and put back.
"""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
import triton

import triton_dist._backends as backends
import triton_dist._contextual.session as session
from tests.contextual import _kernels as K
from triton_dist.autotuner import contextual_autotune


@pytest.fixture(autouse=True)
def in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the tuning log goes to ./.autotune_logs


def counted(monkeypatch: pytest.MonkeyPatch, counts: Counter) -> None:
    """Count the settings read by the backend's lookup and by the session, and the watches made."""
    for module in (backends, session):
        real = module.get_settings

        def read(real: Any = real) -> Any:
            counts["settings"] += 1
            return real()

        monkeypatch.setattr(module, "get_settings", read)

    class Watch(session.StateWatch):
        def __init__(self) -> None:
            counts["watch"] += 1
            super().__init__()

    monkeypatch.setattr(session, "StateWatch", Watch)


def test_a_cached_call_reads_the_settings_once_and_makes_no_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    scale = K.make_scale((16, 32))

    @contextual_autotune(n_repeat=1, n_warmup=0)
    def outer(x: torch.Tensor) -> torch.Tensor:
        y, n = torch.empty_like(x), x.numel()
        scale[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, 2.0, n)
        return y * torch.rand(1)  # a draw: the generator is still taken and put back

    counts: Counter = Counter()
    counted(monkeypatch, counts)
    x = torch.randn(100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the log's announcement
        torch.manual_seed(3)
        tuned = outer(x)
    assert scale.cache and counts["watch"] == 1  # the call that tuned watched its runs
    rng_after_tuning = torch.get_rng_state()
    counts.clear()
    torch.manual_seed(3)
    cached = outer(x)
    assert counts == Counter(settings=1)  # was: settings=2, watch=1
    torch.testing.assert_close(cached, tuned)  # the kept run drew what one untuned call draws
    assert torch.equal(torch.get_rng_state(), rng_after_tuning)


def steps_of(call: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], Counter]:
    """The import statements run by triton_dist's own code during ``call()`` (``file: module``),
    and the calls made (``module file stem.function`` for Python functions, also as
    ``caller's stem>stem.function``; the name for builtins)."""
    import builtins
    import sys

    imports: list[str] = []
    real_import = builtins.__import__

    def counting_import(name: str, *args: Any, **kwargs: Any) -> Any:
        where = sys._getframe(1).f_code.co_filename
        if "triton_dist" in Path(where).parts:
            imports.append(f"{Path(where).name}: {name}")
        return real_import(name, *args, **kwargs)

    calls: Counter = Counter()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            callee = f"{Path(frame.f_code.co_filename).stem}.{frame.f_code.co_name}"
            calls[callee] += 1
            if frame.f_back is not None:  # and by its caller's module: "caller_stem>callee"
                calls[f"{Path(frame.f_back.f_code.co_filename).stem}>{callee}"] += 1
        elif event == "c_call":
            calls[getattr(arg, "__name__", repr(arg))] += 1

    monkeypatch.setattr(builtins, "__import__", counting_import)
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
        monkeypatch.setattr(builtins, "__import__", real_import)
    return imports, calls


def cached_outer() -> tuple[Any, torch.Tensor]:
    scale = K.make_scale((16, 32))

    @contextual_autotune(n_repeat=1, n_warmup=0)
    def outer(x: torch.Tensor) -> torch.Tensor:
        y, n = torch.empty_like(x), x.numel()
        scale[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, 2.0, n)
        return y

    x = torch.randn(100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the log's announcement
        outer(x)  # tunes
    outer(x)  # cached: anything done once per process is done
    assert scale.cache
    return outer, x


def test_a_cached_call_enters_no_context_manager_imports_nothing_and_names_by_qualname(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """ContextualAutoTuner.__call__ on a cached call: its two generator-based context managers
    cost ~1 µs each, its import of the Session class ~0.7 µs, and the tuner's qualname made the
    function's repr (~0.3 µs) it only needs without a __qualname__."""
    outer, x = cached_outer()
    imports, calls = steps_of(lambda: outer(x), monkeypatch)
    assert [i for i in imports if i.startswith("autotuner.py")] == []
    assert not [c for c in calls if c.startswith("contextlib.")]
    assert calls["__repr__"] == calls["repr"] == 0
    torch.testing.assert_close(outer(x), x * 2.0)  # still the call's result


def test_the_takeover_of_a_cached_call_imports_nothing_and_dresses_its_run_as_wraps_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Takeover, made and installed on every call: its import of Triton's Autotuner cost ~1 µs and
    functools.wraps ~1.1 µs (its assignments written out: ~0.4 µs); Autotuner.run still reads as
    stock's while taken over."""
    from triton.runtime.autotuner import Autotuner

    original = Autotuner.__dict__["run"]
    outer, x = cached_outer()
    seen: list[Any] = []
    fn = outer.fn

    def spying(x: torch.Tensor) -> torch.Tensor:
        run = Autotuner.__dict__["run"]
        seen.append((run is not original, run.__wrapped__ is original, run.__name__, run.__qualname__,
                     run.__module__, run.__doc__, run.__annotations__ is original.__annotations__))
        return fn(x)

    monkeypatch.setattr(outer, "fn", spying)
    imports, calls = steps_of(lambda: outer(x), monkeypatch)
    assert [i for i in imports if i.startswith(("takeover.py", "triton_compat.py"))] == []
    # (its own run and those of the subclasses with one: triton-ascend's AutoTilingTuner)
    assert calls["takeover>functools.update_wrapper"] == calls["takeover>functools.wraps"] == 0
    assert calls["takeover._wraps"] >= 1  # (the counting sees the takeover's module)
    assert seen == [(True, True, original.__name__, original.__qualname__, original.__module__,
                     original.__doc__, True)]
    assert Autotuner.__dict__["run"] is original


def stock_key(arg_names: list[str], keys: list[str], args: tuple, kwargs: dict) -> tuple:
    """The key as Triton 3.x's Autotuner.run computes it (triton/runtime/autotuner.py)."""
    nargs = dict(zip(arg_names, args, strict=False))
    all_args = {**nargs, **kwargs}
    _args = {k: v for (k, v) in all_args.items() if k in arg_names}
    key = [_args[key] for key in keys if key in _args]
    for _, arg in _args.items():
        if hasattr(arg, "dtype"):
            key.append(str(arg.dtype))
    return tuple(key)


def test_the_key_of_a_launch_is_stocks_for_any_mix_of_positional_and_keyword_arguments() -> None:
    """tuning_key builds the arguments by name once (and keeps a torch dtype's text): the key is
    still stock run's, argument order, keywords naming arguments and non-torch dtypes included."""
    import random

    import numpy as np

    from triton_dist._contextual import triton_compat as compat

    class At:
        arg_names: list[str]
        keys: list[str]

    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def __str__(self) -> str:
            return "unhashable dtype"

    values = [torch.zeros(2), torch.zeros(2, dtype=torch.float16), 3, 4.0, np.zeros(2, dtype=np.int8),
              None, "s", torch.zeros(1, dtype=torch.int64), type("T", (), {"dtype": Unhashable()})()]
    names = ["a", "b", "c", "d", "e"]
    rng = random.Random(1)
    for _ in range(3000):
        at = At()
        at.arg_names = rng.sample(names, rng.randint(0, 5))
        at.keys = rng.sample([*names, "zz"], rng.randint(0, 4))
        args = tuple(rng.choice(values) for _ in range(rng.randint(0, 6)))
        kwargs = {name: rng.choice(values) for name in rng.sample([*names, "grid", "warmup"], rng.randint(0, 4))}
        key, named = compat.tuning_key(at, args, kwargs)
        expected = stock_key(at.arg_names, at.keys, args, kwargs)
        assert len(key) == len(expected) and all(a is b or a == b for a, b in zip(key, expected, strict=True))
        assert list(named) == [k for k in at.keys if k in {**dict(zip(at.arg_names, args, strict=False)), **kwargs}
                               and k in at.arg_names]


def test_the_settings_read_of_a_cached_call_runs_no_generator_per_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """get_settings' stamp of the environment (a cached contextual call reads it for its backend):
    a generator expression resumed once per variable cost ~0.3 µs of each read."""
    from triton_dist.settings import get_settings

    outer, x = cached_outer()
    _, calls = steps_of(lambda: outer(x), monkeypatch)
    assert calls["settings.get_settings"] == 1
    assert calls["settings.<genexpr>"] == 0
    before = get_settings()
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S", "7")  # still read as it changes
    assert get_settings().agree_timeout_s == 7.0 and before.agree_timeout_s != 7.0


def test_a_cached_launch_takes_its_key_in_one_pass_and_skips_the_steps_of_a_tuning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What each launch of a cached call does besides stock run: the key in one pass (comprehensions
    and zip(strict=) took ~1.5 µs a launch), no lookup in the empty table of kernels tuning, no
    group check without is_dist, no due-steps check with nothing due; and per call, no generator
    over that empty table and no import of torch.distributed for the rank."""
    outer, x = cached_outer()
    imports, calls = steps_of(lambda: outer(x), monkeypatch)
    assert calls["session.handle"] == 1
    assert calls["triton_compat.<listcomp>"] == calls["triton_compat.<dictcomp>"] == 0
    assert calls["run_state._decided_by_group"] == calls["session._before_real"] == 0
    assert calls["run_state.<genexpr>"] == 0
    assert [i for i in imports if i.startswith(("session.py", "run_state.py"))] == []
    torch.testing.assert_close(outer(x), x * 2.0)


def test_a_cached_call_makes_no_timer_of_samples_and_stores_no_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """Session's timer of samples is made by the first kernel that tunes, not by every call, and
    what a call that tunes nothing never changes (run_tunes, late_keys, the watch, the log, the
    paused collector) starts as a class attribute: ~0.2 µs a call."""
    outer, x = cached_outer()
    made: list[Any] = []
    real_init = session.Session.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(session.Session, "__init__", init)
    _, calls = steps_of(lambda: outer(x), monkeypatch)
    assert calls["schedule.__init__"] == 0  # Samples.__init__
    (made_session,) = made
    assert not {"samples", "late_keys", "watch", "_log", "_paused"} & set(vars(made_session))
    assert made_session.run_index == 1 and made_session.run_tunes is False and made_session.watch is None
