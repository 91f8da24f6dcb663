"""``TRITON_DIST_HARDWARE_OVERRIDE``: the documented test/ops override of the hardware digest.

Set, it becomes part of the hardware description (so the digest, so the entry ids) and every
process says so; unset, the digest is the device's own. An entry tuned under one override is a
miss under another, exactly as between two kinds of accelerator.
"""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from triton_dist._backends import get_backend
from triton_dist._store.fingerprint import HARDWARE_OVERRIDE, hardware_info
from triton_dist.errors import CacheMissError
from triton_dist.tune import autotune

CALLS: Counter = Counter()


def work(n: int, c: int) -> int:
    CALLS[c] += 1
    return n * 10 + c


def fresh_tuner():
    """A new tuner of ``work`` (nothing remembered in memory: every call decides from the disk).
    ``graphs=False``: ``work`` queues no device work, so a device's default graph replay would
    capture nothing; the eager schedule measures it on any backend."""
    return autotune(config_space=[{"c": 0}, {"c": 1}, {"c": 2}], key_fn=lambda n: ("n", n), n_warmup=1,
                    n_repeat=2, graphs=False)(work)


def test_override_changes_the_digest_openly(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
                                            fresh_backends: None) -> None:
    backend = get_backend()
    monkeypatch.delenv(HARDWARE_OVERRIDE, raising=False)
    own = hardware_info(backend)
    assert "override" not in own
    with caplog.at_level(logging.WARNING, logger="triton_dist._store.fingerprint"):
        monkeypatch.setenv(HARDWARE_OVERRIDE, "kind-a")
        a = hardware_info(backend)
        monkeypatch.setenv(HARDWARE_OVERRIDE, " kind-b ")
        b = hardware_info(backend)
        assert hardware_info(backend) is b  # computed (and said) once per override
    assert a["override"] == "kind-a" and b["override"] == "kind-b"
    assert len({own["digest"], a["digest"], b["digest"]}) == 3
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2 and all("TRITON_DIST_HARDWARE_OVERRIDE" in w and "test/ops override" in w
                                      for w in warnings)
    monkeypatch.setenv(HARDWARE_OVERRIDE, "")  # empty is unset: never a silent default
    assert hardware_info(backend) == own


def test_an_entry_tuned_under_one_override_misses_under_another(monkeypatch: pytest.MonkeyPatch,
                                                                fresh_backends: None) -> None:
    monkeypatch.setenv(HARDWARE_OVERRIDE, "kind-a")
    assert fresh_tuner()(4) in (40, 41, 42) and sum(CALLS.values()) > 3  # tuned: every config measured
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_ONLY", "strict")
    CALLS.clear()
    assert fresh_tuner()(4) in (40, 41, 42) and sum(CALLS.values()) == 1  # kind a: a hit, one call
    monkeypatch.setenv(HARDWARE_OVERRIDE, "kind-b")
    with pytest.raises(CacheMissError):
        fresh_tuner()(4)  # "kind b": its digest has no entry
    monkeypatch.delenv(HARDWARE_OVERRIDE)
    with pytest.raises(CacheMissError):
        fresh_tuner()(4)  # nor has the device's own digest
