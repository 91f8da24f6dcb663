"""Which exceptions are a config's failure (inf, tuning goes on) and which are bugs (raised)."""

from __future__ import annotations

import json

import pytest

from triton_dist.tune import autotune


class VendorError(Exception):
    """A library's own error class, unrelated to Python's built-in hierarchy."""


def _tuner(exc):
    def host(x, c):
        if c == 1:
            raise exc
        return x + c

    def equal_times(fn, n_warmup, n_repeat):  # runs the config once, then reports a tie
        fn()
        return [1.0] * n_repeat

    return autotune([{"c": 0}, {"c": 1}, {"c": 2}], key_fn=lambda x: (x,), do_bench=equal_times)(host)


@pytest.mark.parametrize("exc", [Exception("rejected"), VendorError("no such mode"),
                                 RuntimeError("out of resources"), ValueError("BLOCK too large")])
def test_a_config_that_raises_is_inf_with_its_reason(exc, cache_dir):
    tuned = _tuner(exc)
    assert tuned(5) == 5  # config 0 wins the tie; config 1 failed
    (entry_file,) = (cache_dir / "host").glob("*.json")
    failed = json.loads(entry_file.read_text())["candidates"][1]
    assert failed["time_ms"] is None and str(exc) in failed["error"]


@pytest.mark.parametrize("exc", [TypeError("bad call"), NameError("undefined"),
                                 AttributeError("no attr"), KeyError("BLOCK_K")])
def test_a_bug_propagates(exc):
    with pytest.raises(type(exc)):
        _tuner(exc)(5)
