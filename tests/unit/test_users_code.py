"""Host functions, configs and keys as users write them (found by driving the public API with code
written outside the project, 2026-12-03): each of these once tuned wrong, shared an entry it must
not share, or failed with an error that did not say what to do."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from triton_dist.errors import KeyFunctionError, TritonDistWarning
from triton_dist.tune import autotune


@pytest.fixture(autouse=True)
def _on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """These host functions are torch code on the CPU (and so are their children's): measured by
    the CPU backend, also on a machine with a GPU, whose graphs would capture nothing of them."""
    monkeypatch.setenv("TRITON_DIST_DEVICE", "cpu")


def timed_by(times: dict[Any, float], seen: list[Any]) -> Any:
    """A ``do_bench`` that runs the candidate once and reports the time given for its config."""
    def do_bench(fn: Any, n_warmup: int, n_repeat: int) -> list[float]:
        fn()
        return [times[seen[-1]]] * n_repeat
    return do_bench


def entries(root: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(root.rglob("*.json")) if p.parent.name != "_index"]


# ------------------------------------------------------------------------- config values

class Opaque:
    """A value whose repr is its address: the disk can keep its type only."""

    def __init__(self, factor: float) -> None:
        self.factor = factor



def fast_impl(x: Any) -> Any:
    return x


def slow_impl(x: Any) -> Any:
    return x


CHILD = textwrap.dedent("""
    import functools, json, sys
    import torch
    from triton_dist.tune import autotune
    sys.path.insert(0, {root!r})
    from tests.unit.test_users_code import fast_impl, slow_impl

    seen = []
    def do_bench(fn, w, r):
        fn()
        return [{{"fast": 1.0, "slow": 2.0}}[seen[-1]]] * r

    space = [{{"impl": slow_impl, "scale": functools.partial(slow_impl)}},
             {{"impl": fast_impl, "scale": functools.partial(fast_impl)}}]

    @autotune(space, key_fn=lambda x, *a, **k: tuple(x.shape), do_bench=do_bench)
    def host(x, impl, scale):
        seen.append(impl.__name__.split("_")[0])
        return impl(x)

    host(torch.ones(2))
    print(json.dumps([host.best_config(torch.ones(2))["impl"].__name__, len(seen)]))
""")


def test_functions_as_config_values_are_told_apart_on_disk(cache_dir: Path, tmp_path: Path) -> None:
    """A function in a config was written by its type alone ("builtins.function"): every config
    read back as the first one, and a second process ran the slower config the first had not
    chosen. Functions are written by their qualified names, partials by their parts."""
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(root=str(Path(__file__).parents[2])))
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "TRITON_DIST_AUTOTUNE_DIR": str(cache_dir)})
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert runs[0] == ["fast_impl", 3]  # tuned: two candidates' runs and the call
    assert runs[1] == ["fast_impl", 1]  # a hit: the call alone, with the config the first chose


def test_configs_the_disk_cannot_tell_apart_are_re_tuned_never_mixed_up(cache_dir: Path) -> None:
    seen: list[Any] = []
    slow, fast = Opaque(2.0), Opaque(1.0)
    space = [{"op": slow}, {"op": fast}]

    def host(x: Any, op: Opaque) -> Any:
        seen.append(op.factor)
        return x * op.factor

    do_bench = timed_by({2.0: 2.0, 1.0: 1.0}, seen)
    with pytest.warns(TritonDistWarning, match=r"configs \[0, 1\].*tuned in every process"):
        first = autotune(space, key_fn=lambda x, *a, **k: tuple(x.shape), do_bench=do_bench)(host)
    first(torch.ones(2))
    assert first.best_config(torch.ones(2))["op"] is fast
    (entry,) = entries(cache_dir)
    assert entry["best"]["index"] == 1
    # another tuner of the same function (what a second process is): the entry cannot say which
    # Opaque won, so it tunes again instead of taking config 0, the first that reads alike
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TritonDistWarning)
        second = autotune(space, key_fn=lambda x, *a, **k: tuple(x.shape), do_bench=do_bench)(host)
    seen.clear()
    second(torch.ones(2))
    assert len(seen) > 1, "the second tuner took the entry from the disk"
    assert second.best_config(torch.ones(2))["op"] is fast


@pytest.mark.parametrize("space", [
    [{"a": 1}, {"a": 1}],
    [{"w": torch.zeros(3000)}, {"w": torch.zeros(3000)}],  # equal content, other objects
    [{"p": functools.partial(fast_impl, 1)}, {"p": functools.partial(fast_impl, 1)}],
    [{"f": fast_impl}, {"f": fast_impl}],
    [{"a": float("nan")}, {"a": float("nan")}],
], ids=["ints", "tensors", "partials", "functions", "nan"])
def test_duplicate_configs_are_not_taken_for_configs_the_disk_cannot_tell_apart(space: list) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", TritonDistWarning)
        tuned = autotune(space, key_fn=lambda x, *a, **k: x)(lambda x, **k: x)
    assert [json.dumps(c, default=str) for c in tuned.target.encoded][0] == \
        [json.dumps(c, default=str) for c in tuned.target.encoded][1]


@pytest.mark.parametrize("space", [
    [{"p": lambda x: x}, {"p": lambda x: x}],
    [{"p": functools.partial(lambda x: x)}, {"p": functools.partial(lambda x: x)}],
    [{"o": Opaque(1.0)}, {"o": Opaque(2.0)}],
], ids=["lambdas", "partials-of-lambdas", "objects"])
def test_configs_written_alike_that_differ_are_marked(space: list) -> None:
    from triton_dist._store.files import SAME_ON_DISK

    with pytest.warns(TritonDistWarning, match="written to the disk cache alike"):
        tuned = autotune(space, key_fn=lambda x, *a, **k: x)(lambda x, **k: x)
    assert [c[SAME_ON_DISK] for c in tuned.target.encoded] == [0, 1]


def test_tensors_in_configs_are_written_by_content() -> None:
    from triton_dist._store.files import encode_value

    a, b = torch.zeros(5000), torch.zeros(5000)
    b[2500] = 1.0  # their reprs are both cut short to "tensor([0., 0., 0.,  ..., 0., 0., 0.])"
    assert repr(a) == repr(b)
    assert encode_value(a) != encode_value(b)
    assert encode_value(a) == encode_value(a.clone())
    assert encode_value(functools.partial(fast_impl, 1)) != encode_value(functools.partial(slow_impl, 1))


def test_verbose_hit_with_tensor_config_values() -> None:
    space = [{"w": torch.ones(3)}, {"w": torch.full((3,), 2.0)}]
    tuned = autotune(space, key_fn=lambda x, *a, **k: tuple(x.shape),
                     do_bench=lambda fn, w, r: [fn() is None or 1.0] * r)(lambda x, w: x * w)
    for _ in range(3):  # the third call is an in-memory hit that autotune_verbose reports
        assert torch.equal(tuned(torch.ones(3), autotune_verbose=True), torch.ones(3))


# ------------------------------------------------------------------------- host functions

def test_stacked_tuners_each_tune_their_own_fields(cache_dir: Path) -> None:
    key = lambda x, *a, **k: tuple(x.shape)  # noqa: E731
    bench = lambda fn, w, r: [float(fn().sum())] * r  # noqa: E731 - the smaller result is faster

    @autotune([{"A": 2}, {"A": 1}], key_fn=key, do_bench=bench)
    @autotune([{"B": 20}, {"B": 10}], key_fn=key, do_bench=bench)
    def f(x: Any, A: int, B: int) -> Any:
        return x * A + B

    assert f.config_space == [{"A": 2}, {"A": 1}]
    assert torch.equal(f(torch.ones(2)), torch.full((2,), 11.0))
    assert f.best_config(torch.ones(2)) == {"A": 1}
    # two entries: the outer's and the inner's (the inner's face is the outer's function)
    assert sorted(json.dumps(e["best"]["config"]) for e in entries(cache_dir)) == ['{"A": 1}', '{"B": 10}']


def make_op(block: int) -> Any:
    """A factory: the functions it makes share their source, not what they capture."""
    def op(x: Any, BLOCK: int) -> Any:
        return x * (1.0 if BLOCK == block else 2.0)
    return op


def test_functions_of_one_factory_do_not_share_entries(cache_dir: Path) -> None:
    bench = lambda fn, w, r: [float(fn().sum())] * r  # noqa: E731
    space = [{"BLOCK": 64}, {"BLOCK": 128}]
    op_a = autotune(space, key_fn=lambda x, *a, **k: tuple(x.shape), do_bench=bench)(make_op(64))
    op_b = autotune(space, key_fn=lambda x, *a, **k: tuple(x.shape), do_bench=bench)(make_op(128))
    op_a(torch.ones(4))
    op_b(torch.ones(4))
    assert op_a.best_config(torch.ones(4)) == {"BLOCK": 64}
    assert op_b.best_config(torch.ones(4)) == {"BLOCK": 128}
    assert len(entries(cache_dir)) == 2


def test_a_callable_without_a_name_is_refused_with_the_fix() -> None:
    with pytest.raises(TypeError, match=r"no __name__.*def host\(\*args, \*\*kwargs\)"):
        autotune([{"c": 1}], key_fn=lambda *a, **k: 1)(functools.partial(fast_impl))


def test_an_out_argument_the_function_resizes_is_restored_between_runs() -> None:
    """torch's out= convention (``out.resize_(...)`` on an empty buffer) once failed every
    candidate: the restore copied a 4-element snapshot-less shape into a 0-element one."""
    @autotune([{"BLOCK": 64}, {"BLOCK": 128}], key_fn=lambda x, *a, **k: tuple(x.shape))
    def double(x: Any, out: Any, BLOCK: int) -> Any:
        out.resize_(x.shape)
        torch.mul(x, 2, out=out)
        return out

    out = torch.empty(0)
    assert torch.equal(double(torch.arange(4.0), out), torch.arange(4.0) * 2)
    assert torch.equal(out, torch.arange(4.0) * 2)


def test_a_broadcast_view_argument_is_restored_through_its_memory() -> None:
    @autotune([{"BLOCK": 64}, {"BLOCK": 128}], key_fn=lambda x, *a, **k: tuple(x.shape))
    def bump(x: Any, rows: Any, BLOCK: int) -> Any:
        total = rows.sum()
        x.add_(1)
        return total

    x = torch.zeros(3)
    assert float(bump(x, x.expand(2, 3))) == 0.0  # every run saw the caller's zeros
    assert x.tolist() == [1.0, 1.0, 1.0]  # and the call's own update happened once


def test_a_restore_that_fails_is_the_tuners_warning_not_every_candidates_failure() -> None:
    """A tensor the restore cannot write back (here: one whose storage the function swaps for a
    smaller one) is no longer restored, with a warning; the candidates still run and the call
    still returns (before: every candidate failed, NoValidConfigError)."""
    @autotune([{"BLOCK": 64}, {"BLOCK": 128}], key_fn=lambda x, *a, **k: tuple(x.shape))
    def swap(x: Any, BLOCK: int) -> Any:
        x.set_(torch.ones(1))  # one element: its old 3 elements do not fit any more
        return x.sum()

    with pytest.warns(TritonDistWarning, match="could not restore mutated tensor argument 0"):
        assert float(swap(torch.zeros(3))) == 1.0


# ------------------------------------------------------------------------- keys

@pytest.mark.parametrize(("key", "what"), [
    (lambda x, *a, **k: x, "torch.Tensor"),
    (lambda x, *a, **k: (tuple(x.shape), float("nan")), "NaN"),
    (lambda x, *a, **k: (tuple(x.shape), x.abs().max()), "torch.Tensor"),  # a 0-d tensor, hashable
])
def test_keys_that_could_not_find_their_config_again_are_refused(key: Any, what: str) -> None:
    tuned = autotune([{"c": 1}, {"c": 2}], key_fn=key, do_bench=lambda fn, w, r: [1.0] * r)(
        lambda x, c: x * c)
    with pytest.raises(KeyFunctionError, match=f"{what}.*to_hashable"):
        tuned(torch.ones(3))


class GemmConfig:
    """A config object as users write them: it prints itself, but compares by identity."""

    def __init__(self, block_m: int) -> None:
        self.block_m = block_m

    def __repr__(self) -> str:
        return f"GemmConfig(block_m={self.block_m})"


def test_a_key_holding_an_object_compared_by_identity_is_refused_on_its_look_alike(cache_dir: Path) -> None:
    # a new GemmConfig per call: every call missed, read the entry its text names from disk and
    # kept the object alive in the tuner's decisions (U15's leftover); refused at the second
    # call, with the fix
    timed = []

    def bench(fn: Any, w: int, r: int) -> list[float]:
        timed.append(fn)
        return [1.0] * r

    tuned = autotune([{"c": 1}, {"c": 2}], key_fn=lambda x, cfg, *a, **k: (tuple(x.shape), cfg),
                     do_bench=bench)(lambda x, cfg, c: x * c)
    x = torch.ones(3)
    tuned(x, GemmConfig(64))
    tuned(x, GemmConfig(128))  # another key, printed otherwise: tuned, no error
    with pytest.raises(KeyFunctionError, match=r"GemmConfig compared by identity.*frozen=True"):
        tuned(x, GemmConfig(64))
    assert len(tuned.tuner._best) == 2
    # the same object on every call (a module's constant) hits, as does a class with equality
    shared = GemmConfig(256)
    assert [float(tuned(x, shared).sum()) for _ in range(3)] == [3.0] * 3 and len(tuned.tuner._best) == 3
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Frozen:
        block_m: int

    timed.clear()
    for _ in range(3):
        tuned(x, Frozen(64))
    assert len(timed) == 2  # one tuning of the key (two configs), then hits
    # keys equal in value stay equal after clear(), which forgets the texts with the decisions
    tuned.clear()
    tuned(x, GemmConfig(64))


def test_unequal_keys_that_print_alike_are_refused(cache_dir: Path) -> None:
    class Block(int):  # equal by value to ints, but not to a float of the same text
        def __repr__(self) -> str:
            return "64"

    tuned = autotune([{"c": 1}], key_fn=lambda x, b, *a, **k: (b,), do_bench=lambda fn, w, r: [1.0] * r)(
        lambda x, b, c: x * c)
    tuned(torch.ones(1), Block(64))
    tuned(torch.ones(1), 64)  # equal to Block(64): a hit
    with pytest.raises(KeyFunctionError, match="share one cache entry"):
        tuned(torch.ones(1), Block(65))


def test_a_captured_device_counts_by_its_kind_not_its_index() -> None:
    """A host function made per rank with its device captured (cuda:0, cuda:1) is the same
    function on every rank: the ranks agree on the source hash."""
    from triton_dist._store.fingerprint import source_hash

    def make(device: Any, block: int) -> Any:
        def host(x: Any) -> Any:
            return x.to(device) * block
        return host

    assert source_hash(make(torch.device("cuda", 0), 4)) == source_hash(make(torch.device("cuda", 1), 4))
    assert source_hash(make(torch.device("cuda", 0), 4)) != source_hash(make(torch.device("cpu"), 4))
    assert source_hash(make(torch.device("cuda", 0), 4)) != source_hash(make(torch.device("cuda", 0), 8))
