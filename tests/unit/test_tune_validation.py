"""Bad input caught early: config_space at decoration time, key_fn and prune_fn at the call."""

from __future__ import annotations

import random

import pytest

from triton_dist.errors import ConfigSpaceError, KeyFunctionError, NoValidConfigError, PruneError
from triton_dist.tune import AutoTuner, autotune

from .helpers import make_tuner


def host(x, c, d=0):
    return x, c, d


def keyword_only(x, *, c):
    return x, c


def positional_only(x, c, /):
    return x, c


def any_kwargs(x, **kwargs):
    return x, kwargs


def key_fn(x, *args, **kwargs):
    return x


@pytest.mark.parametrize(
    ("space", "names"),
    [
        ({"c": 1}, "dict"),
        (None, "NoneType"),
        ("c", "str"),
        ((config for config in [{"c": 1}]), "generator"),
        ([], "empty"),
        ([{"c": 1}, 2], "config_space[1]"),
        ([{"c": 1}, [("c", 2)]], "config_space[1]"),
        ([{"c": 1}, {}], "config_space[1]"),
        ([{"c": 1}, {"e": 2}], "config_space[1]"),
        ([{"c": 1, 3: 4}], "config_space[0]"),
    ],
)
def test_bad_config_space_is_a_value_error_naming_the_entry(space, names):
    with pytest.raises(ValueError, match=names.replace("[", r"\[")) as info:
        autotune(config_space=space, key_fn=key_fn)(host)
    assert isinstance(info.value, ConfigSpaceError)


def test_a_field_the_function_cannot_take_names_field_and_function():
    with pytest.raises(ValueError, match=r"config_space\[2\].*'block'.*host") as info:
        autotune(config_space=[{"c": 1}, {"c": 2, "d": 1}, {"block": 4}], key_fn=key_fn)(host)
    assert "add a parameter" in str(info.value)
    with pytest.raises(ValueError, match="'c'"):
        autotune(config_space=[{"c": 1}], key_fn=key_fn)(positional_only)


def test_keyword_only_and_var_keyword_functions_are_accepted():
    # graphs=False: these functions queue no device work, which a device's default graph replay
    # would capture (an empty graph); the eager schedule runs them on every backend
    assert autotune(config_space=[{"c": 1}], key_fn=key_fn, graphs=False)(keyword_only)(3) == (3, 1)
    assert autotune(config_space=[{"anything": 1}], key_fn=key_fn, graphs=False)(any_kwargs)(3) == (
        3, {"anything": 1})


def test_decorated_function_keeps_its_identity():
    tuned = autotune(config_space=[{"c": 1}], key_fn=key_fn)(host)
    assert isinstance(tuned, AutoTuner)
    assert tuned.__name__ == "host" and tuned.__wrapped__ is host
    assert tuned.config_space == [{"c": 1}]


def test_non_callable_key_fn_or_prune_fn_is_refused_at_decoration():
    with pytest.raises(TypeError, match="key_fn"):
        autotune(config_space=[{"c": 1}], key_fn=None)(host)
    with pytest.raises(ValueError, match="prune_fn"):
        autotune(config_space=[{"c": 1}], key_fn=key_fn, prune_fn=3)(host)


# ---------------------------------------------------------------- keys

@pytest.mark.parametrize("bad_key", [[1, 2], {"a": 1}, (1, [2]), {1, 2}])
def test_an_unhashable_key_is_a_type_error_that_says_so(bad_key):
    tuned, probe = make_tuner(key=lambda x: bad_key)
    with pytest.raises(TypeError, match="unhashable") as info:
        tuned(1)
    assert isinstance(info.value, KeyFunctionError)
    assert probe.total == 0


class _Opaque:
    """Hashable, but its repr is the default one: a memory address."""


class _Jittery:
    """Hashable, with a repr that changes every time it is asked."""

    def __hash__(self) -> int:
        return 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Jittery)

    def __repr__(self) -> str:
        return f"Jittery({random.random()})"


@pytest.mark.parametrize("bad_key", [_Opaque(), (1, _Opaque()), _Jittery(), object()])
def test_a_key_without_a_stable_repr_is_a_type_error_that_says_so(bad_key):
    tuned, probe = make_tuner(key=lambda x: bad_key)
    with pytest.raises(TypeError, match="repr") as info:
        tuned(1)
    assert isinstance(info.value, KeyFunctionError)
    assert probe.total == 0


def test_key_fn_errors_propagate_unchanged():
    def broken(x):
        raise KeyError("no such field")

    tuned, probe = make_tuner(key=broken)
    with pytest.raises(KeyError, match="no such field"):
        tuned(1)
    assert probe.total == 0


# ---------------------------------------------------------------- pruning

def test_prune_keeping_nothing_is_an_error_naming_the_key():
    tuned, probe = make_tuner(key=lambda x: ("shape", x), prune=lambda config, x: False)
    with pytest.raises(ValueError, match=r"\('shape', 12\)") as info:
        tuned(12)
    assert isinstance(info.value, PruneError)
    assert "kept no config" in str(info.value)
    assert probe.total == 0  # never an empty benchmark, never a silent default


def test_prune_fn_that_raises_is_a_clear_error():
    def prune(config, x):
        if config["c"] == 1:
            raise ZeroDivisionError("bad budget")
        return True

    tuned, probe = make_tuner(prune=prune)
    with pytest.raises(PruneError, match=r"config_space\[1\].*ZeroDivisionError: bad budget") as info:
        tuned(1)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert probe.total == 0
    # nothing was decided: a later call asks again
    with pytest.raises(PruneError):
        tuned(1)


# ---------------------------------------------------------------- failing candidates

def test_a_failing_config_is_recorded_and_tuning_goes_on(cache_dir):
    from .helpers import only_entry

    tuned, probe = make_tuner(fail={1: RuntimeError("out of resources: shared memory, required: 999")})
    assert tuned(1)[1] in (0, 2)
    assert probe.calls[1] == 1  # the first run raised: the config is not run again
    assert probe.calls[0] >= 15 and probe.calls[2] >= 15
    entry = only_entry(cache_dir)
    failed = entry["candidates"][1]
    assert failed["time_ms"] is None
    assert "RuntimeError" in failed["error"] and "out of resources" in failed["error"]
    # measured (a device's event pair around this host-only function may read 0.0 ms)
    assert all(c["error"] is None and c["time_ms"] >= 0 and c["runs"] >= 15
               for i, c in enumerate(entry["candidates"]) if i != 1)
    assert entry["best"]["index"] in (0, 2)


def test_triton_out_of_resources_is_a_config_failure():
    from triton.runtime.errors import OutOfResources

    tuned, _ = make_tuner(fail={0: OutOfResources(200000, 101376, "shared memory")})
    assert tuned(1)[1] in (1, 2)


def test_every_config_failing_is_an_error_listing_each_config_and_why():
    tuned, probe = make_tuner(fail={
        0: RuntimeError("out of resources"),
        1: ValueError("BLOCK must divide n"),
        2: MemoryError("too big"),
    })
    with pytest.raises(NoValidConfigError) as info:
        tuned(1)
    message = str(info.value)
    assert isinstance(info.value, RuntimeError)
    for index, why in enumerate(["RuntimeError: out of resources", "ValueError: BLOCK must divide n",
                                 "MemoryError: too big"]):
        assert f"config_space[{index}]" in message and why in message
    assert tuned.best_config(1) is None  # no silent default
    assert probe.calls == {0: 1, 1: 1, 2: 1}


@pytest.mark.parametrize("bug", [TypeError("missing argument"), NameError("nme"), AttributeError("attr")])
def test_a_bug_in_the_host_function_propagates(bug, cache_dir):
    tuned, probe = make_tuner(fail={1: bug})
    with pytest.raises(type(bug), match=str(bug)):
        tuned(1)
    assert probe.calls[2] == 0  # measuring stopped at the bug
    assert not list(cache_dir.glob("*/*.json"))  # nothing cached
    assert tuned.best_config(1) is None
