"""The hit path's callers (triton_dist/_callers.py): a decided key's call passes its config's fields
as keyword constants through a generated function. What a caller must keep: the host function
called once per call with the same arguments as ``fn(*args, **best)``, any number of positional
arguments under one key, the host's own errors untouched, and decisions made again reaching it."""

from __future__ import annotations

import pickle
import traceback

import pytest

from triton_dist._callers import MAX_ARITY, bind
from triton_dist.tune import autotune

ONE = lambda fn, w, r: [1.0] * r  # noqa: E731 - every config equal: the first one wins


def closure_cell(face, name):
    return face.__closure__[face.__code__.co_freevars.index(name)].cell_contents


def test_bind_passes_the_config_as_keywords_to_any_callable():
    seen = []

    def host(*args, **kwargs):
        seen.append((args, kwargs))
        return len(seen)

    call = bind(host, {"BLOCK": 64, "num_warps": 4}, 2)
    assert call(1, "a") == 1 and seen == [((1, "a"), {"BLOCK": 64, "num_warps": 4})]
    assert bind(max, {"default": 0}, 1)([]) == 0  # a builtin works as well
    with pytest.raises(TypeError):
        call(1)  # a caller takes the number of arguments it was bound for
    # fields that cannot be keywords in source, and many arguments: a caller of any arity
    odd = bind(host, {"block-size": 8, "lambda": 1}, 1)
    assert odd(1) == 2 and odd(1, 2) == 3 and seen[-1] == ((1, 2), {"block-size": 8, "lambda": 1})
    ligature = bind(host, {"\ufb01eld": 1}, 1)  # "ﬁeld": in source it would read "field" (NFKC)
    assert ligature(0) == 4 and seen[-1] == ((0,), {"\ufb01eld": 1})
    many = bind(host, {"c": 1}, MAX_ARITY + 1)
    assert many(*range(MAX_ARITY + 1)) == 5 and seen[-1] == (tuple(range(MAX_ARITY + 1)), {"c": 1})


def test_a_hit_calls_the_host_once_with_the_decided_config(cache_dir):
    calls = []

    def host(x, y, c, d=0):
        calls.append((x, y, c, d))
        return x + y + c

    tuned = autotune([{"c": 2, "d": 5}, {"c": 3, "d": 6}], key_fn=lambda x, *a: (x,), do_bench=ONE)(host)
    assert tuned(1, 10) == 13  # the miss: tuned, then the call
    calls.clear()
    assert [tuned(1, 10), tuned(1, 20)] == [13, 23]  # hits: the first binds the caller
    assert calls == [(1, 10, 2, 5), (1, 20, 2, 5)]
    assert (1,) in tuned.tuner._calls and closure_cell(tuned, "calls") is tuned.tuner._calls


def test_one_key_called_with_another_number_of_arguments_runs_the_host_once(cache_dir):
    calls = []

    def host(x, y=0, *, c):
        calls.append((x, y, c))
        return x * 100 + y * 10 + c

    tuned = autotune([{"c": 1}, {"c": 2}], key_fn=lambda x, *a: (x,), do_bench=ONE)(host)
    assert tuned(3) == 301 and tuned(3) == 301  # the caller takes one argument
    calls.clear()
    assert [tuned(3, 4), tuned(3), tuned(3, 5)] == [341, 301, 351]
    assert calls == [(3, 4, 1), (3, 0, 1), (3, 5, 1)]  # one run each, whichever arity


def test_the_host_functions_own_type_error_propagates_once_with_its_traceback(cache_dir):
    runs = []

    def host(x, c):
        runs.append(x)
        if x < 0:
            raise TypeError(f"negative {x}")
        return x * c

    tuned = autotune([{"c": 2}], key_fn=lambda x: x >= 0, do_bench=ONE)(host)
    assert tuned(1) == 2 and tuned(2) == 4  # the key True: decided, its caller bound
    tuned(0)  # the key True again
    runs.clear()
    with pytest.raises(TypeError, match="negative -1") as info:
        tuned(-1)  # key False: a miss whose measurement fails in every config
    runs.clear()
    tuned.tuner._best[False] = {"c": 2}  # decided (as a cache load would), no caller yet
    for _ in range(2):  # unbound, then through its caller
        with pytest.raises(TypeError, match="negative -5") as info:
            tuned(-5)
    assert runs == [-5, -5]  # never run twice for one call
    text = "".join(traceback.format_exception(info.value))
    assert "return fn(a0, c=v0)" in text and 'raise TypeError(f"negative {x}")' in text


def test_a_decision_made_again_reaches_the_caller(cache_dir):
    def host(x, c):
        return x * c

    times = {2: 1.0, 3: 2.0}
    tuned = autotune([{"c": 2}, {"c": 3}], key_fn=lambda x: (x,),
                     do_bench=lambda fn, w, r: [times[fn() // 10]] * r)(host)
    assert tuned(10) == 20 and tuned(10) == 20
    times.update({2: 3.0, 3: 1.0})
    tuned.tune(10)  # force: measured again, config 1 now
    assert tuned(10) == 30
    tuned.clear()  # the cache entry on disk (config 1) decides again
    assert tuned.best_config(10) is None and tuned(10) == 30 and tuned(10) == 30


def test_a_copy_of_the_face_reads_its_own_tuners_callers(cache_dir):
    cloudpickle = pytest.importorskip("ray.cloudpickle", reason="Ray ships cloudpickle (not on the GPU machine)")

    def host(x, c):
        return x * c

    tuned = autotune([{"c": 2}, {"c": 3}], key_fn=lambda x: (x,), do_bench=ONE)(host)
    assert tuned(5) == 10 and tuned(5) == 10 and (5,) in tuned.tuner._calls
    assert type(tuned.tuner._calls) is dict and closure_cell(tuned, "calls") is tuned.tuner._calls
    copy = cloudpickle.loads(cloudpickle.dumps(tuned))
    assert closure_cell(copy, "calls") is copy.tuner._calls and closure_cell(copy, "tuner") is copy.tuner
    assert copy(5) == 10 and copy(5) == 10 and (5,) in copy.tuner._calls
    copy.tuner.clear()  # the copy's face reads the copy's callers: nothing stale stays
    assert closure_cell(copy, "calls") == {} and copy(6) == 12 and copy(5) == 10
    assert tuned(5) == 10 and (5,) in tuned.tuner._calls  # the original binds again after the pickling


def test_a_tuner_with_bound_callers_pickles_by_value_with_the_standard_pickle(cache_dir):
    """Generated callers cannot be pickled by reference: the tuner's copy by value (a face that
    cannot be imported by its name) empties them, and the copy binds its own."""
    tuned = autotune([{"c": 2}, {"c": 3}], key_fn=_module_key, do_bench=_one)(_module_host)
    assert tuned(5) == 10 and tuned(5) == 10 and (5,) in tuned.tuner._calls
    copy = pickle.loads(pickle.dumps(tuned.tuner))
    assert copy is not tuned.tuner and copy._calls == {} and copy._best == {(5,): {"c": 2}}
    assert copy.face(5) == 10 and copy.face(5) == 10 and (5,) in copy._calls
    assert tuned(5) == 10


def _module_host(x, c):
    return x * c


def _module_key(x):
    return (x,)


def _one(fn, warmup, rep):
    return [1.0] * rep


def test_errors_on_a_hit_are_told_apart_by_where_they_were_raised(cache_dir):
    # the hit is one expression in one try (P1): its handler tells the host function's errors
    # (raised below its caller), key_fn's and the lookup's apart. Each case: what propagates, how
    # often key_fn and the host ran
    import operator

    runs, keys = [], []

    def host(x, c):
        runs.append(x)
        if x == "key error":
            raise KeyError("the host's own")
        if x == "type error":
            raise TypeError("the host's own")
        return c

    def key_fn(x):
        keys.append(x)
        if x == "bad key":
            raise KeyError("key_fn's own")
        return x if x != "none" else None

    tuned = autotune([{"c": 1}, {"c": 2}], key_fn=key_fn, do_bench=ONE)(host)
    for x in ("key error", "type error", "none", "ok"):
        tuned.tuner._best[None if x == "none" else x] = {"c": 1}  # decided: hits from the first call
    for x, error in (("key error", KeyError), ("type error", TypeError)):
        for _ in range(2):  # unbound, then through its caller
            runs.clear(), keys.clear()
            with pytest.raises(error, match="the host's own") as info:
                tuned(x)
            assert runs == [x] and keys == [x]
            assert info.value.__context__ is None and info.value.__cause__ is None
            faces = [line for line in traceback.format_tb(info.value.__traceback__) if "return calls[" in line]
            assert len(faces) <= 1  # raised again as it was, the face once in its traceback
    runs.clear(), keys.clear()
    with pytest.raises(KeyError, match="key_fn's own"):
        tuned("bad key")
    assert runs == [] and keys == ["bad key"]  # key_fn once, the host never
    assert [tuned("none"), tuned("none"), tuned("ok"), tuned("ok")] == [1, 1, 1, 1]  # None is a key like any
    # a key_fn written in C: no frame of its own below the face's
    by_item = autotune([{"c": 1}, {"c": 2}], key_fn=operator.itemgetter("n"), do_bench=ONE)(lambda d, c: c)
    assert by_item({"n": 3}) == 1 and by_item({"n": 3}) == 1
    with pytest.raises(KeyError, match="'n'"):
        by_item({"m": 3})
    # key_fn that cannot take the call: the named error, as before
    from triton_dist.errors import KeyFunctionError

    two = autotune([{"c": 1}], key_fn=lambda x, y: (x, y), do_bench=ONE)(lambda x, c: c)
    with pytest.raises(KeyFunctionError):
        two(1)


def test_an_unhashable_key_on_a_hit_path_is_the_named_error(cache_dir):
    from triton_dist.errors import KeyFunctionError

    tuned = autotune([{"c": 1}], key_fn=lambda x: [x], do_bench=ONE)(lambda x, c: c)
    with pytest.raises(KeyFunctionError) as info:
        tuned(1)
    assert info.value.__context__ is None or not isinstance(info.value.__context__, KeyError)


def test_the_hit_is_a_few_dozen_bytes_of_bytecode(cache_dir):
    # P1 with cold caches: the hit's instructions, up to its return, fit one or two cache lines
    # (a handler between its statements spread them over ~190 bytes on Python 3.11)
    import dis

    tuned = autotune([{"c": 1}], key_fn=lambda x: x, do_bench=ONE)(lambda x, c: c)
    returns = [i.offset for i in dis.get_instructions(tuned) if i.opname in ("RETURN_VALUE", "RETURN_CONST")]
    assert returns and returns[0] <= 64
