"""TRITON_DIST_AUTOTUNE_CACHE_ONLY in one process: a miss never tunes.

``1``: the miss runs config_space[0] with one warning per key; ``strict``: the miss raises a
CacheMissError naming the function, the key and why no entry matched.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter

import pytest

from triton_dist.errors import CacheMissError, TritonDistWarning
from triton_dist.settings import override
from triton_dist.tune import autotune

SPACE = [{"c": 0}, {"c": 1}, {"c": 2}]
calls: Counter = Counter()


def host(n, c):
    calls[c] += 1
    return c, sum(range(n * (c + 1)))


def tuner(space=SPACE, fn=host):
    """A fresh AutoTuner (empty in-memory state) over the same function: a new process, in effect."""
    return autotune(config_space=list(space), key_fn=lambda n: ("n", n), n_warmup=0, n_repeat=2)(fn)


@pytest.fixture(autouse=True)
def _reset_calls():
    calls.clear()


def _seed(n: int) -> int:
    seeded = tuner()
    best = seeded(n)[0]
    calls.clear()
    return best


def test_strict_after_seeding_hits_and_measures_nothing(cache_dir):
    best = _seed(50)
    files = sorted(cache_dir.rglob("*"))
    with override(TRITON_DIST_AUTOTUNE_CACHE_ONLY="strict"):
        warm = tuner()
        assert warm(50) == (best, sum(range(50 * (best + 1))))
        assert warm(50)[0] == best
    assert calls == {best: 2}  # the two calls themselves, nothing measured
    assert sorted(cache_dir.rglob("*")) == files  # nothing written


def test_strict_miss_names_the_function_the_key_and_why(cache_dir):
    _seed(50)
    with override(TRITON_DIST_AUTOTUNE_CACHE_ONLY="strict"), pytest.raises(CacheMissError) as info:
        tuner()(60)
    message = str(info.value)
    assert "test_cache_only.host" in message and "('n', 60)" in message
    assert info.value.details["function"].endswith("test_cache_only.host")
    assert info.value.details["key"] == "('n', 60)"
    # the reason is the diagnosis: the nearest entry is for another key
    assert "differs in key" in info.value.details["reason"]
    assert "('n', 50)" in info.value.details["reason"]
    assert calls == {}


def test_strict_miss_on_an_empty_cache_says_there_is_nothing(cache_dir):
    with override(TRITON_DIST_AUTOTUNE_CACHE_ONLY="strict"), pytest.raises(CacheMissError) as info:
        tuner()(7)
    assert "no cache entries for function 'host'" in info.value.details["reason"]
    assert calls == {} and not cache_dir.exists()


def _make_edited_host():
    def host(n, c):  # same name, another body: another source hash
        calls[c] += 1
        return c, sum(range(n * (c + 2)))

    return host


def test_strict_miss_after_a_source_edit_names_the_source(cache_dir):
    _seed(50)
    with override(TRITON_DIST_AUTOTUNE_CACHE_ONLY="strict"), pytest.raises(CacheMissError) as info:
        tuner(fn=_make_edited_host())(50)
    reason = info.value.details["reason"]
    assert "differs in source" in reason and "source hash" in reason
    assert calls == {}


@pytest.mark.filterwarnings("ignore::triton_dist.errors.TritonDistWarning")
def test_strict_miss_when_the_best_config_left_the_space(cache_dir):
    best = _seed(50)
    smaller = [c for c in SPACE if c["c"] != best]
    with override(TRITON_DIST_AUTOTUNE_CACHE_ONLY="strict"), pytest.raises(CacheMissError) as info:
        tuner(smaller)(50)
    assert "config_space" in info.value.details["reason"]
    assert calls == {}


def test_cache_only_1_runs_config_space_0_and_warns_once_per_key(cache_dir, caplog):
    _seed(50)
    caplog.set_level(logging.WARNING, logger="triton_dist")
    with override(TRITON_DIST_AUTOTUNE_CACHE_ONLY="1"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # count every warning, not Python's once-per-place
        cold = tuner()
        assert cold(60)[0] == 0
        assert cold(60)[0] == 0
        assert cold(70)[0] == 0
        assert cold(60)[0] == 0
    ours = [w for w in caught if issubclass(w.category, TritonDistWarning)]
    assert len(ours) == 2
    assert "('n', 60)" in str(ours[0].message) and "('n', 70)" in str(ours[1].message)
    assert "config_space[0]" in str(ours[0].message)
    records = [r for r in caplog.records if "CACHE_ONLY=1" in r.getMessage()]
    assert len(records) == 2
    assert calls == {0: 4}  # the calls themselves, with the default; nothing measured
    assert len(list((cache_dir / "host").glob("*.json"))) == 1  # nothing written


def test_cache_only_1_still_uses_hits(cache_dir):
    best = _seed(50)
    with override(TRITON_DIST_AUTOTUNE_CACHE_ONLY="1"), warnings.catch_warnings():
        warnings.simplefilter("error", TritonDistWarning)  # a hit warns nothing
        assert tuner()(50)[0] == best
    assert calls == {best: 1}


def test_cache_only_with_a_grown_space_uses_the_cached_best_untuned(cache_dir):
    best = _seed(50)
    with override(TRITON_DIST_AUTOTUNE_CACHE_ONLY="strict"):
        assert tuner(SPACE + [{"c": 3}])(50)[0] == best
    assert calls == {best: 1}


def test_tune_with_force_still_tunes_in_cache_only_mode(cache_dir):
    with override(TRITON_DIST_AUTOTUNE_CACHE_ONLY="strict"):
        entry = tuner().tune(40)
    assert entry["key"] == "('n', 40)" and calls == {0: 2, 1: 2, 2: 2}  # measured, not called after
