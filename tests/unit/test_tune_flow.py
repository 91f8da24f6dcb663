"""One process, one tuner: what each call runs, in what numbers, and what it returns."""

from __future__ import annotations

import pytest

from triton_dist.errors import DuplicateArgumentError, TritonDistWarning
from triton_dist.tune import autotune

from .helpers import SPACE, entries, make_tuner


def test_each_kept_config_runs_5_warmup_plus_10_timed_and_the_best_once_more():
    tuned, probe = make_tuner()
    result = tuned(7)
    assert probe.keys == 1
    best = tuned.best_config(7)["c"]
    assert probe.calls == {c: 15 + (c == best) for c in (0, 1, 2)}
    # the result is the one of the final call, made with the best config
    assert result == (7, best, 3 * 15 + 1)
    assert probe.order[-1] == best
    from triton_dist._backends import get_backend

    if get_backend().interleaved:
        # device backends: every config's 5 warm-ups, then 10 rounds of one timed run each
        assert probe.order[:15] == [0] * 5 + [1] * 5 + [2] * 5
        assert sorted(probe.order[15:45]) == [0] * 10 + [1] * 10 + [2] * 10
    else:  # host-timed: configs are measured one after the other, in config_space order
        assert probe.order[:45] == [0] * 15 + [1] * 15 + [2] * 15


def test_same_key_again_is_one_host_call_and_nothing_else():
    tuned, probe = make_tuner(prune=lambda config, x: True)
    tuned(3)
    best = tuned.best_config(3)["c"]
    before, prunes, keys = probe.total, len(probe.prunes), probe.keys
    assert tuned(3) == (3, best, before + 1)
    assert probe.total == before + 1
    assert probe.keys == keys + 1  # key_fn is how the key is found
    assert len(probe.prunes) == prunes  # no pruning and no measuring on a known key


def test_a_new_key_is_tuned_on_its_own():
    tuned, probe = make_tuner()
    tuned(1)
    tuned(2)
    assert probe.total == 2 * (3 * 15 + 1)
    assert len(entries_of(tuned)) == 2


def entries_of(tuned):
    from triton_dist.settings import get_settings

    return entries(get_settings().autotune_dir)


def test_autotune_false_calls_config_space_0_and_skips_key_prune_and_measuring(cache_dir):
    tuned, probe = make_tuner(prune=lambda config, x: True, times={0: 3.0, 1: 1.0, 2: 2.0})
    assert tuned(5, autotune=False) == (5, 0, 1)
    assert probe.calls == {0: 1}
    assert probe.keys == 0 and probe.prunes == [] and probe.benches == 0
    assert not cache_dir.exists()  # nothing looked up, measured or written
    # also after tuning picked another config for the same key
    tuned(5)
    assert tuned.best_config(5) == {"c": 1}
    keys, calls0 = probe.keys, probe.calls[0]
    assert tuned(5, autotune=False)[1] == 0
    assert probe.keys == keys and probe.calls[0] == calls0 + 1


def test_call_controls_are_never_passed_to_the_host_function():
    tuned, probe = make_tuner()
    tuned(1, autotune=True, autotune_verbose=False, autotune_allow_arg_overwrite=False, autotune_pg=None)
    tuned(1, autotune=False, autotune_verbose=True)
    assert all(seen == {} for seen in probe.kwargs_seen)


def test_business_kwargs_reach_key_prune_and_host():
    seen_keys = []

    def key(x, *args, **kwargs):
        seen_keys.append((x, args, kwargs))
        return (x, kwargs.get("mode"))

    tuned, probe = make_tuner(key=key, prune=lambda config, x, **kw: kw["mode"] == "fast" or config["c"] == 0)
    tuned(4, mode="fast")
    assert seen_keys[0] == (4, (), {"mode": "fast"})
    assert probe.prunes[0] == (SPACE[0], (4,), {"mode": "fast"})
    assert all(seen == {"mode": "fast"} for seen in probe.kwargs_seen)
    tuned(4, mode="slow")  # prune keeps config 0 only: measured alone
    assert tuned.best_config(4, mode="slow") == {"c": 0}


def test_prune_fn_filters_what_is_measured():
    tuned, probe = make_tuner(prune=lambda config, x: config["c"] != 1)
    tuned(9)
    assert probe.calls[1] == 0
    assert probe.calls[0] >= 15 and probe.calls[2] >= 15
    assert [config for config, _, _ in probe.prunes] == SPACE  # asked once per config
    assert tuned.best_config(9) in (SPACE[0], SPACE[2])


def test_injected_do_bench_decides_and_ties_go_to_the_earlier_config():
    tuned, probe = make_tuner(times={0: 3.0, 1: 1.0, 2: 2.0})
    assert tuned(1)[1] == 1
    assert probe.benches == 3
    tied, _ = make_tuner(times={0: 2.0, 1: 1.0, 2: 1.0})
    assert tied(1)[1] == 1


def test_the_real_timer_picks_the_fastest_config(monkeypatch):
    # 5 + 10 runs of each: 8 ms, 1 ms, 4 ms of sleep. Selection, not speed, is what is checked.
    # The host timer is the subject (these runs sleep on the host): pinned to the CPU backend,
    # also on a machine with a GPU, whose event pairs time device work only
    monkeypatch.setenv("TRITON_DIST_DEVICE", "cpu")
    tuned, _ = make_tuner(sleep_ms={0: 8.0, 1: 1.0, 2: 4.0}, n_warmup=1, n_repeat=5)
    assert tuned(1)[1] == 1
    entry_times = {c["index"]: c["time_ms"] for c in _entry(tuned)["candidates"]}
    assert entry_times[1] < entry_times[2] < entry_times[0]


def _entry(tuned):
    import json

    (path,) = entries_of(tuned)
    return json.loads(path.read_text())


# ---------------------------------------------------------------- duplicate keyword arguments

@pytest.mark.parametrize("autotune", [True, False])
def test_a_business_kwarg_named_like_a_config_field_is_a_value_error(autotune):
    tuned, probe = make_tuner()
    with pytest.raises(ValueError, match="'c'") as info:
        tuned(1, c=5, autotune=autotune)
    assert isinstance(info.value, DuplicateArgumentError)
    assert "autotune_allow_arg_overwrite" in str(info.value)
    assert probe.total == 0 and probe.benches == 0


def test_duplicate_kwarg_after_tuning_is_still_an_error():
    tuned, probe = make_tuner()
    tuned(1)
    calls = probe.total
    with pytest.raises(ValueError, match="'c'"):
        tuned(1, c=5)
    assert probe.total == calls


def test_allow_arg_overwrite_lets_the_business_value_win_with_a_warning():
    tuned, probe = make_tuner()
    with pytest.warns(TritonDistWarning, match="'c'"):
        result = tuned(1, c=42, autotune_allow_arg_overwrite=True)
    assert result[1] == 42
    assert set(probe.calls) == {42}  # every run, tuning included, saw the business value
    with pytest.warns(UserWarning, match="'c'"):
        assert tuned(1, c=43, autotune_allow_arg_overwrite=True)[1] == 43
    with pytest.warns(UserWarning, match="'c'"):
        assert tuned(2, c=44, autotune=False, autotune_allow_arg_overwrite=True)[1] == 44


# ---------------------------------------------------------------- verbosity

def test_verbose_prints_the_tuning_and_quiet_prints_nothing(capsys, cache_dir):
    tuned, _ = make_tuner()
    tuned(1)
    assert capsys.readouterr().out == ""
    tuned(2, autotune_verbose=True)
    out = capsys.readouterr().out
    assert "tuning" in out and "best config" in out
    for index in range(3):
        assert f"config {index}" in out
    # full logs go next to the cache entry either way
    logs = sorted((cache_dir / "host").glob("*.log"))
    assert len(logs) == 2
    assert all("best config" in log.read_text() for log in logs)
    tuned(2, autotune_verbose=True)  # a known key: its hit is said once (issue 18 item 11)
    assert "in-memory hit for key ('x', 2)" in capsys.readouterr().out
    tuned(2, autotune_verbose=True)
    assert capsys.readouterr().out == ""



@autotune([{"c": 2}, {"c": 3}], key_fn=lambda x: (x,), do_bench=lambda fn, w, r: [1.0] * r)
def scaled(x, c):
    return x * c


def test_a_tuner_pickles_by_reference_and_calls_like_the_function(cache_dir):
    import pickle

    assert scaled(5) == 10 and scaled(x=5) == 10  # without and with keywords
    assert pickle.loads(pickle.dumps(scaled)) is scaled  # a spawned process gets its own module's tuner
    assert pickle.loads(pickle.dumps(scaled.tuner)) is scaled.tuner
    local = autotune([{"c": 2}], key_fn=lambda x: (x,))(lambda x, c: x)
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(local)  # not importable: an error, never a copy that lost its decisions


class _Layer:
    def __init__(self, factor):
        self.factor = factor

    @autotune([{"c": 2}, {"c": 3}], key_fn=lambda self, x, *a, **k: (x,), do_bench=lambda fn, w, r: [1.0] * r)
    def forward(self, x, c):
        return self.factor * x * c


def test_the_face_is_a_plain_function_that_is_an_autotuner(cache_dir):
    """What autotune returns is a Python function (its call stays in the caller's interpreter
    loop: issue 16, P1), and an AutoTuner for isinstance, with the tuner's public attributes."""
    import types

    from triton_dist.tune import AutoTuner

    def host(x, c, d=0):
        return x, c, d

    tuned = autotune([{"c": 2}, {"c": 3}], key_fn=lambda x, *a, **k: (x,),
                     do_bench=lambda fn, w, r: [1.0] * r)(host)
    assert type(tuned) is types.FunctionType and isinstance(tuned, AutoTuner)
    assert isinstance(tuned.tuner, AutoTuner) and tuned.tuner.face is tuned
    assert not isinstance(host, AutoTuner) and not isinstance(lambda: None, AutoTuner)
    assert tuned.fn is host and tuned.target is tuned.tuner.target and tuned.key_fn(4) == (4,)
    assert tuned.best_config(4) is None
    assert tuned(4) == (4, 2, 0) and tuned.best_config(4) == {"c": 2}
    assert tuned.tuner(4) == (4, 2, 0)  # the AutoTuner itself calls like its face
    assert tuned.tuner._best == {(4,): {"c": 2}}
    tuned.clear()  # the face's methods act on the tuner the face reads
    assert tuned.best_config(4) is None and tuned(4, autotune=False) == (4, 2, 0)
    assert tuned.tune(4, write_cache=False)["best"]["index"] == 0 and (4,) in tuned.tuner._best
    layer = _Layer(10)  # a decorated method binds like a function
    assert layer.forward(2) == 40 and _Layer.forward(layer, 1) == 20


def test_a_face_copied_by_value_reads_its_own_tuner_with_the_decisions_made(cache_dir):
    """cloudpickle copies a function it cannot import (a script's __main__, a closure) by value,
    as Ray does for a task's globals: the copy's face and tuner then share one dict of decisions,
    the ones made so far, and new decisions reach the face (nothing stays on the slow path)."""
    import pickle

    cloudpickle = pytest.importorskip("ray.cloudpickle", reason="Ray ships cloudpickle (not on the GPU machine)")

    def host(x, c):
        return x * c

    tuned = autotune([{"c": 2}, {"c": 3}], key_fn=lambda x, *a, **k: (x,),
                     do_bench=lambda fn, w, r: [1.0] * r)(host)
    assert tuned(5) == 10
    copy = cloudpickle.loads(cloudpickle.dumps(tuned))
    assert copy is not tuned and copy.tuner is not tuned.tuner and copy.tuner.face is not tuned
    assert copy.best_config(5) == {"c": 2} and copy(5) == 10  # the decision came along
    assert copy(7) == 14 and copy.tuner is copy.__closure__[  # a new decision: the face's tuner's
        copy.__code__.co_freevars.index("tuner")].cell_contents
    assert (7,) in copy.tuner._best and (7,) not in tuned.tuner._best
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(tuned)  # the standard pickle imports functions: a local one is an error


def test_a_copy_by_value_loaded_in_another_process_decides_there(cache_dir, tmp_path):
    """A tuner copied by value keeps its decisions only in the process that pickled it: another
    process (a Ray actor given a driver's closure) decides from its own disk cache or tunes, as its
    hardware, entries and TRITON_DIST_CACHE_ONLY say (before, a driver's decisions came along:
    found by a tester, session 28)."""
    import os
    import subprocess
    import sys

    cloudpickle = pytest.importorskip("ray.cloudpickle", reason="Ray ships cloudpickle (not on the GPU machine)")

    def host(x, c):
        return x * c

    tuned = autotune([{"c": 2}, {"c": 3}], key_fn=lambda x, *a, **k: (x,),
                     do_bench=lambda fn, w, r: [1.0] * r)(host)
    tuned.tune(5, write_cache=False)  # decided in memory, not written: an empty disk cache
    assert tuned.best_config(5) == {"c": 2}
    blob = tmp_path / "tuned.pkl"
    blob.write_bytes(cloudpickle.dumps(tuned))
    child = (
        "import sys\nfrom ray import cloudpickle\nfrom triton_dist.errors import CacheMissError\n"
        "copy = cloudpickle.loads(open(sys.argv[1], 'rb').read())\n"
        "print('best', copy.best_config(5))\n"
        "try:\n    copy(5)\nexcept CacheMissError:\n    print('strict miss')\n")
    env = {**os.environ, "TRITON_DIST_AUTOTUNE_CACHE_ONLY": "strict"}
    out = subprocess.run([sys.executable, "-c", child, str(blob)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:2] == ["best None", "strict miss"]
    copy = cloudpickle.loads(blob.read_bytes())  # loaded in this process: the decision comes along
    assert copy.best_config(5) == {"c": 2} and copy(5) == 10


def test_configs_that_all_fail_alike_point_at_the_host_function_not_the_configs(cache_dir):
    """Every config failing with one error is not the configs' fault: the advice says so, and for
    a stock @triton.autotune kernel that cannot benchmark off a device it names contextual_autotune
    (a tester was told to "fix the failing configs or prune them with prune_fn", session 28);
    configs failing each their own way keep that advice."""
    from triton_dist.errors import NoValidConfigError

    def driverless(x, c):
        raise RuntimeError("0 active drivers ([]). There should only be one.")

    tuner = autotune([{"c": 1}, {"c": 2}], key_fn=lambda x: (x,))(driverless)
    with pytest.raises(NoValidConfigError, match=r"(?s)same error.*not the cause.*contextual_autotune"):
        tuner(1)

    def picky(x, c):
        raise ValueError(f"config {c} is too large")

    tuner = autotune([{"c": 1}, {"c": 2}], key_fn=lambda x: (x,))(picky)
    with pytest.raises(NoValidConfigError, match="Fix the failing configs or prune them") as caught:
        tuner(1)
    assert "same error" not in str(caught.value)


def test_options_of_the_wrong_type_are_refused_at_decoration(cache_dir):
    """n_repeat=1.5 ran once, graphs="no" turned graphs on, adaptive="false" turned adaptive on, and
    a do_bench of another signature was a bare TypeError at the first call (a tester, session 28)."""
    from triton_dist.errors import ConfigSpaceError

    def host(x, c):
        return x

    space, key = [{"c": 1}], (lambda x: (x,))
    for bad, match in (({"n_repeat": 1.5}, "n_repeat .* must be an int"), ({"n_warmup": "2"}, "must be an int"),
                       ({"graphs": "no"}, "graphs .* must be True or False"), ({"adaptive": "false"}, "adaptive"),
                       ({"check_correctness": 2}, "check_correctness"),
                       ({"do_bench": lambda fn: [1.0]}, r"do_bench .* must take \(fn, n_warmup, n_repeat\)")):
        with pytest.raises(ConfigSpaceError, match=match):
            autotune(space, key, **bad)(host)
    import numpy as np

    tuned = autotune(space, key, n_repeat=np.int64(2), graphs=None, adaptive=0,  # what callers pass: taken
                     do_bench=lambda fn, w, r: [1.0] * r)(host)
    assert tuned(3) == 3


def test_a_banner_first_line_gives_way_to_the_reason_and_tritons_own_errors_blame_the_configs(cache_dir):
    """triton-ascend's MLIRCompilationError opens with a banner line, and only that was recorded; and
    configs all failing Triton's own check (a static_assert on BLOCK) were said not to be the cause
    (a tester, 2026-12-04)."""
    from triton_dist._measure.result import describe
    from triton_dist.errors import NoValidConfigError

    class MLIRCompilationError(Exception):
        pass

    text = ("\n///------------------[ERROR][Triton][BEG]------------------\n[bishengir-compile] encounters "
            "error:\nloc(x): error: ub overflow, requires 4194304 bits\n///------[ERROR][Triton][END]------")
    assert describe(MLIRCompilationError(text)) == ("MLIRCompilationError: [bishengir-compile] encounters error: | "
                                                    "loc(x): error: ub overflow, requires 4194304 bits")
    assert describe(ValueError("BLOCK=100: not a power of 2\nmore")) == "ValueError: BLOCK=100: not a power of 2"

    from triton.runtime.errors import InterpreterError

    def host(x, c):
        raise InterpreterError("static_assert failed: BLOCK <= 256")

    tuner = autotune([{"c": 1}, {"c": 2}], key_fn=lambda x: (x,))(host)
    with pytest.raises(NoValidConfigError, match="Fix the failing configs or prune them") as caught:
        tuner(1)
    assert "not the cause" not in str(caught.value)


def test_a_call_control_that_is_not_a_switch_is_refused(cache_dir):
    """autotune="no" was taken as true and tuned (a tester, 2026-12-04)."""
    calls = []

    @autotune([{"c": 1}, {"c": 2}], lambda x: (x,), do_bench=lambda fn, w, r: [fn() or 1.0] * r)
    def host(x, c):
        calls.append(c)
        return x

    for control in ("autotune", "autotune_verbose", "autotune_allow_arg_overwrite"):
        with pytest.raises(TypeError, match=f"{control}= takes True or False, got 'no'"):
            host(1, **{control: "no"})
    assert not calls
    assert host(1, autotune=0) == 1 and calls == [1]  # 0 and 1 are taken
    import numpy as np

    assert host(1, autotune=np.bool_(False)) == 1 and calls == [1, 1]  # so is a NumPy bool (step < warm)


def test_a_bug_that_stops_tuning_names_the_config_and_the_key(cache_dir):
    """A classic bug raised by one config stops tuning (docs/architecture.md); it came back bare,
    naming neither the config nor the key (a tester, 2026-12-04)."""
    table = {64: 1.0, 256: 1.0}

    @autotune([{"block": 64}, {"block": 128}, {"block": 256}], lambda n: (n,), do_bench=lambda fn, w, r: [fn()] * r)
    def host(n, block):
        return n * table[block]

    with pytest.raises(KeyError) as info:
        host(3)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "config_space[1] = {'block': 128}" in notes and "key (3,)" in notes and "stopped tuning" in notes
    assert notes.count("stopped tuning") == 1


def test_a_timer_of_tritons_kind_runs_for_its_own_milliseconds(cache_dir):
    """triton.testing.do_bench's warmup and rep are milliseconds: called as do_bench(fn, n_warmup,
    n_repeat) it took the counts 2 and 3 for 2 ms and 3 ms, a partial binding warmup= was refused,
    and when it failed for want of a driver the advice blamed the host function (a tester,
    2026-12-04). It is called as do_bench(fn) now, and the advice names it."""
    import functools

    import torch
    import triton.testing

    from triton_dist.errors import ConfigSpaceError, NoValidConfigError

    seen = []

    def ms_timer(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
        seen.append((warmup, rep))
        fn()
        return 0.5 if seen[-1] == (25, 100) or warmup == 1 else 9.0

    ms_timer.__module__, ms_timer.__name__ = "triton.testing", "do_bench"  # Triton's, as a spy

    def host(x, c):
        return x * c

    tuned = autotune([{"c": 1}, {"c": 2}], lambda x: (x,), n_warmup=2, n_repeat=3, do_bench=ms_timer)(host)
    assert tuned(3) in (3, 6) and seen == [(25, 100)] * 2  # its own budget, never the counts
    seen.clear()
    partial = functools.partial(ms_timer, warmup=1, rep=1)
    tuned = autotune([{"c": 1}, {"c": 2}], lambda x: (x,), do_bench=partial)(host)
    assert tuned(4) in (4, 8) and seen == [(1, 1)] * 2
    # triton.testing.do_bench itself is taken at decoration; on a GPU it times the candidates, off a
    # device it cannot run, and says why
    tuned = autotune([{"c": 1}, {"c": 2}], lambda x: (x,), do_bench=triton.testing.do_bench)(host)
    if torch.cuda.is_available():
        assert tuned(5) in (5, 10)
    else:
        with pytest.raises(NoValidConfigError, match=r"(?s)same error.*do_bench=.*do_bench.*leave do_bench out"):
            tuned(5)
    with pytest.raises(ConfigSpaceError, match=r"(?s)triton.autotune's kind.*quantiles=None"):
        autotune([{"c": 1}], lambda x: (x,), do_bench=lambda kernel_call, quantiles: [1.0])(host)


def test_always_tune_with_cache_only_is_a_settings_error_naming_both(monkeypatch):
    """The two switches contradict: a valid entry was ignored, then config_space[0] ran untuned, or
    strict raised on a warm-started job (a tester, session 28)."""
    from triton_dist import settings
    from triton_dist.errors import SettingsError

    for cache_only in ("1", "strict"):
        with pytest.raises(SettingsError, match=r"ALWAYS_TUNE=1 and TRITON_DIST_AUTOTUNE_CACHE_ONLY=.*contradict"):
            settings._parse({"TRITON_DIST_AUTOTUNE_ALWAYS_TUNE": "1", "TRITON_DIST_AUTOTUNE_CACHE_ONLY": cache_only})
    off = {"TRITON_DIST_AUTOTUNE_ALWAYS_TUNE": "1", "TRITON_DIST_AUTOTUNE_CACHE_ONLY": "0"}
    assert settings._parse(off).always_tune


def test_checking_correctness_on_a_grown_space_compares_with_config_zero_not_the_cached_best(cache_dir):
    """A wrong but fast config won an unchecked tuning; turning the check on and adding a config
    reused the old timings, so the cached (wrong) best was the reference: the new, correct config
    was recorded wrong and the wrong one stayed best (a tester, session 28). With the check on,
    every kept config is measured, config_space[0] first."""
    import torch

    def host(x, c):
        return x * 2 if c != "wrong" else x * 3

    times = {"ok": 5.0, "wrong": 1.0, "ok2": 2.0}

    def bench(fn, n_warmup, n_repeat):
        fn()
        return [times[current[0]]] * n_repeat

    current = ["ok"]

    def traced(x, c):
        current[0] = c
        return host(x, c)

    traced.__name__ = traced.__qualname__ = "checked_host"
    x = torch.ones(4)
    first = autotune([{"c": "ok"}, {"c": "wrong"}], key_fn=lambda x: (x.numel(),), do_bench=bench)(traced)
    assert torch.equal(first(x), x * 3)  # unchecked: the wrong, fast config wins
    grown = autotune([{"c": "ok"}, {"c": "wrong"}, {"c": "ok2"}], key_fn=lambda x: (x.numel(),), do_bench=bench,
                     check_correctness=True)(traced)
    assert torch.equal(grown(x), x * 2)
    entry = grown.tune(x, force=False)
    errors = {c["index"]: c["error"] for c in entry["candidates"]}
    assert entry["best"]["index"] == 2 and errors[2] is None and "WrongResultError" in str(errors[1])


def test_a_prune_fn_that_returns_none_is_asked_about_its_return_statement(cache_dir):
    """A prune_fn without a return statement pruned everything with "kept no config" (a tester,
    session 28): the error says it returned None."""
    from triton_dist.errors import PruneError

    def prune(config, x):
        config["c"] > 0  # noqa: B015 - the forgotten return

    tuned = autotune([{"c": 1}, {"c": 2}], key_fn=lambda x: (x,), prune_fn=prune)(lambda x, c: x)
    with pytest.raises(PruneError, match="kept no config.*returned None for every config.*return statement"):
        tuned(1)
