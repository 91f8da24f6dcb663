"""Values and calls as outside users wrote them (session 27's review of the public API by a tester
who had not read the code): sets inside dataclasses, enums and config values; tensor subclasses in
keys; configs equal in Python but not on disk; a ``do_bench`` returning one float; ``tune()``'s
keywords; a function name longer than a file name; a positional argument in a config field's place
after a keyword call decided the key. Each of these failed before (docs/reliability.md, U27-rows).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch

from triton_dist.errors import DuplicateArgumentError, KeyFunctionError, TritonDistWarning
from triton_dist.tune import autotune

REPO = Path(__file__).resolve().parents[2]

SETS = r"""
import dataclasses, enum, json, sys
from triton_dist.tune import autotune

@dataclasses.dataclass(frozen=True)
class Spec:
    fused_ops: frozenset
    n: int

class Fused(enum.Enum):
    BIAS_GELU = frozenset({"bias", "gelu", "residual", "dropout"})

calls = []
OPS = frozenset({"bias", "gelu", "residual", "dropout"})

def bench(fn, n_warmup, n_repeat):
    fn()
    return [1.0 if calls[-1] == OPS else 2.0]  # the four-op config wins

@autotune([{"ops": frozenset({"bias"})}, {"ops": OPS}, {"ops": frozenset()}],
          lambda spec, mode: (spec, mode), do_bench=bench)
def host(spec, mode, ops):
    calls.append(ops)
    return sorted(ops)

print("RESULT", json.dumps(host(Spec(frozenset({"alpha", "beta", "gamma", "delta"}), 4), Fused.BIAS_GELU)))
print("CALLS", len(calls))
"""


@pytest.mark.timeout(240)
def test_sets_inside_dataclasses_enums_and_config_values_name_one_entry_whatever_the_hash_seed(cache_dir, tmp_path):
    script = tmp_path / "sets.py"
    script.write_text(SETS)
    counts, results = [], []
    for seed in ("1", "2", "3"):
        done = subprocess.run([sys.executable, "-W", "error::UserWarning", str(script)], capture_output=True,
                              text=True, timeout=120,
                              env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)})
        assert done.returncode == 0, done.stderr[-2000:]
        counts.append(int(done.stdout.split("CALLS")[1]))
        results.append(json.loads(done.stdout.split("RESULT")[1].split("\n")[0]))
    # tuned once (three candidates and the call), then two processes of other hash seeds hit the
    # entry and run the config that won (before: each process tuned again, with a warning that
    # the cached best config was no longer in config_space, and the key named another file)
    assert counts == [4, 1, 1]
    assert results == [["bias", "dropout", "gelu", "residual"]] * 3
    (entry_file,) = (cache_dir / "host").glob("*.json")
    entry = json.loads(entry_file.read_text())
    assert entry["key"] == ("(Spec(fused_ops=frozenset({'alpha', 'beta', 'delta', 'gamma'}), n=4), "
                            "<Fused.BIAS_GELU: frozenset({'bias', 'dropout', 'gelu', 'residual'})>)")
    assert entry["best"]["config"] == {"ops": {"frozenset": ["bias", "dropout", "gelu", "residual"]}}
    assert not (cache_dir / "host" / "history").exists() or not list((cache_dir / "host" / "history").iterdir())


def test_a_tensor_subclass_in_a_key_is_refused_as_a_tensor_is(cache_dir):
    class ScaledTensor(torch.Tensor):
        pass

    calls = Counter()

    @autotune([{"scale": 1}, {"scale": 2}], lambda x: (x,), n_warmup=1, n_repeat=2)
    def host(x, scale):
        calls[scale] += 1
        return x * scale

    with pytest.raises(KeyFunctionError, match=r"a torch\.Tensor subclass .*ScaledTensor"):
        host(torch.ones(2).as_subclass(ScaledTensor))
    with pytest.raises(KeyFunctionError, match=r"a torch\.Tensor \("):
        host(torch.ones(2))
    assert not calls and not cache_dir.exists()  # nothing ran, nothing was written


@pytest.mark.parametrize("space", [[{"flag": True}, {"flag": 1}], [{"flag": 1}, {"flag": 1.0}]],
                         ids=["True-1", "1-1.0"])
def test_configs_equal_in_python_come_back_from_disk_as_the_one_that_won(cache_dir, space):
    calls = []

    def bench(fn, n_warmup, n_repeat):
        fn()
        return [2.0 if type(calls[-1]) is type(space[0]["flag"]) else 1.0]  # config 1 wins

    def host(x, flag):
        calls.append(flag)
        return flag

    tuned = autotune(space, lambda x: x, do_bench=bench)(host)
    first = tuned(0)
    assert type(first) is type(space[1]["flag"])
    reread = autotune(space, lambda x: x, do_bench=bench)(host)  # another process's tuner: the disk
    calls.clear()
    again = reread(0)
    assert calls == [again] and type(again) is type(space[1]["flag"])  # before: config 0's value


def test_a_do_bench_returning_one_float_takes_it_as_the_time_per_run(cache_dir):
    def mean_ms(fn, n_warmup, n_repeat):  # as triton.testing.do_bench returns: one float
        fn()
        return 3.0 if last[-1] == 1 else 1.5

    last = []

    @autotune([{"scale": 1}, {"scale": 2}], lambda x: x.shape, do_bench=mean_ms)
    def host(x, scale):
        last.append(scale)
        return x * scale

    assert host(torch.ones(2)).tolist() == [2.0, 2.0]
    entry = host.tune(torch.ones(2), force=False)
    assert entry["best"]["config"] == {"scale": 2}
    assert sorted(c["time_ms"] for c in entry["candidates"]) == [1.5, 3.0]


@pytest.mark.parametrize("returned", [None, "1.0", {"ms": 1.0}], ids=["None", "str", "dict"])
def test_a_do_bench_returning_something_else_names_what_it_must_return(cache_dir, returned):
    @autotune([{"scale": 1}, {"scale": 2}], lambda x: x.shape, do_bench=lambda fn, w, r: returned)
    def host(x, scale):
        return x * scale

    with pytest.raises(TypeError, match=r"do_bench returned .*must return the per-run times in ms"):
        host(torch.ones(2))
    assert not cache_dir.exists() or not list(cache_dir.rglob("*.json"))


def test_tune_refuses_a_keyword_that_is_a_config_field_as_a_call_does(cache_dir):
    calls = Counter()

    @autotune([{"scale": 1}, {"scale": 2}], lambda x, *a, **k: x.shape, n_warmup=1, n_repeat=2)
    def host(x, scale):
        calls[scale] += 1
        return x * scale

    with pytest.raises(DuplicateArgumentError, match=r"'scale'.*autotune_allow_arg_overwrite"):
        host.tune(torch.ones(5), scale=3)
    with pytest.raises(TypeError, match=r"takes no autotune= keyword"):
        host.tune(torch.ones(5), autotune=False)
    assert not calls
    with pytest.warns(TritonDistWarning, match="override"):
        entry = host.tune(torch.ones(5), scale=3, autotune_allow_arg_overwrite=True)
    assert set(calls) == {3}  # every candidate ran with the business value
    assert entry["key"] == "(5,)"  # torch.Size([5]), written as the tuple it equals


def test_tune_without_force_returns_the_entry_it_finds(cache_dir):
    calls = Counter()

    @autotune([{"scale": 1}, {"scale": 2}], lambda x: x.shape, n_warmup=1, n_repeat=2)
    def host(x, scale):
        calls[scale] += 1
        return x * scale

    first = host.tune(torch.ones(2))
    ran = sum(calls.values())
    with warnings.catch_warnings():
        warnings.simplefilter("error", TritonDistWarning)
        found = host.tune(torch.ones(2), force=False)  # before: RuntimeError "no tuning happened"
    assert sum(calls.values()) == ran  # read, not measured again
    assert found["best"] == first["best"] and found["key"] == first["key"]
    fresh = host.tune(torch.ones(3), force=False)  # no entry yet: it tunes
    assert sum(calls.values()) > ran and fresh["key"] == "(3,)"


def test_a_function_name_longer_than_a_file_name_gets_a_shortened_folder_of_its_own(cache_dir):
    cache_dir.mkdir(parents=True)  # the root exists: before, every call raised OSError (name too long)

    def make(name):
        namespace = {}
        exec(f"def {name}(x, scale):\n    calls.append(scale)\n    return x * scale\n", {"calls": calls}, namespace)
        return namespace[name]

    calls = []
    names = ["launch_" + "x" * 300 + "_a", "launch_" + "x" * 300 + "_b"]
    for name in names:
        host = autotune([{"scale": 1}, {"scale": 2}], lambda x: x.shape, n_warmup=1, n_repeat=2)(make(name))
        with warnings.catch_warnings():
            warnings.simplefilter("error", TritonDistWarning)  # saved, no "could not save" warning
            assert host(torch.ones(2)).shape == (2,)
    folders = sorted(p.name for p in cache_dir.iterdir() if p.is_dir())
    assert len(folders) == 2 and all(len(f.encode()) <= 255 for f in folders)
    assert all(f.startswith("launch_xxx") for f in folders)
    calls.clear()
    again = autotune([{"scale": 1}, {"scale": 2}], lambda x: x.shape, n_warmup=1, n_repeat=2)(make(names[0]))
    again(torch.ones(2))
    assert len(calls) == 1  # a hit in its folder


def test_a_positional_argument_in_a_fields_place_after_a_keyword_call_decided_the_key(cache_dir):
    @autotune([{"block": 1}, {"block": 2}], lambda *a, **k: "one key", n_warmup=1, n_repeat=2)
    def host(block, x):
        return x * block

    with pytest.raises(DuplicateArgumentError, match="'block'"):
        host(torch.ones(2))
    host(x=torch.ones(2))  # decides the key
    for call in (lambda: host(torch.ones(2)), lambda: host(torch.ones(2), x=None)):
        with pytest.raises(DuplicateArgumentError, match="'block'"):  # before: a bare TypeError
            call()
    assert host(x=torch.ones(2)).shape == (2,)


def test_a_host_functions_own_typeerror_is_not_told_as_a_clash(cache_dir):
    @autotune([{"block": 1}, {"block": 2}], lambda x, **k: "k", n_warmup=1, n_repeat=2)
    def host(x, block, **extra):
        if extra:
            raise TypeError("host says no")
        return x

    assert host(1) == 1
    with pytest.raises(TypeError, match="host says no") as info:
        host(1, other=2)
    assert not isinstance(info.value, DuplicateArgumentError)


@dataclasses.dataclass(frozen=True)
class _Plain:
    n: int


class _Mode(enum.Enum):
    A = 1


def test_dataclass_and_enum_keys_without_sets_keep_their_own_repr(cache_dir):
    @autotune([{"block": 1}, {"block": 2}], lambda spec, mode: (spec, mode), n_warmup=1, n_repeat=2)
    def host(spec, mode, block):
        return block

    host(_Plain(3), _Mode.A)
    (entry_file,) = next(p for p in cache_dir.iterdir() if p.is_dir()).glob("*.json")
    assert json.loads(entry_file.read_text())["key"] == repr((_Plain(3), _Mode.A))


def test_a_set_config_value_is_shown_as_the_set_it_stands_for():
    from ray_runner.results import config_text
    from triton_dist._cli.render import render_value
    from triton_dist._store.files import encode_value

    encoded = encode_value(frozenset({"gelu", "bias"}))
    assert encoded == {"frozenset": ["bias", "gelu"]}
    assert render_value(encoded) == "frozenset({'bias', 'gelu'})"
    assert render_value(encode_value({3, 1})) == "{1, 3}" and render_value(encode_value(set())) == "set()"
    assert config_text({"ops": encoded}) == "ops=frozenset({'bias', 'gelu'})"


def test_tune_names_an_unhashable_key_as_a_call_does(cache_dir):
    @autotune([{"scale": 1}, {"scale": 2}], lambda x: [tuple(x.shape)], n_warmup=1, n_repeat=2)
    def host(x, scale):
        return x * scale

    for call in (lambda: host(torch.ones(2)), lambda: host.tune(torch.ones(2))):  # tune(): a bare TypeError before
        with pytest.raises(KeyFunctionError, match="returned an unhashable list"):
            call()
