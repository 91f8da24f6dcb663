"""Keys that Python holds equal name one cache entry (a tester, 2026-12-04).

A process takes ``2`` and ``2.0`` (``torch.Size([64])`` and ``(64,)``, ``np.int64(64)`` and ``64``)
as one key: one tuning, then in-memory hits. On disk they named two entries, so a campaign's
``alpha: 2`` missed a training job's ``alpha=2.0`` and ``CACHE_ONLY=strict`` refused the call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from triton_dist._store.keytext import stable_key_text

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import sys, numpy as np, torch
from triton_dist.tune import autotune

calls = []

@autotune([{"block": 1}, {"block": 2}], lambda shape, alpha: (shape, alpha), n_warmup=1, n_repeat=2)
def scale(shape, alpha, block):
    calls.append(block)
    return alpha * block

for text in sys.argv[1:]:
    shape, alpha = eval(text)
    scale(shape, alpha)
print("CALLS", len(calls))
"""


def _run(script: Path, *calls: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *calls], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env})


@pytest.mark.timeout(240)
def test_a_key_equal_in_python_hits_the_entry_another_process_wrote(cache_dir, tmp_path):
    script = tmp_path / "equal_keys.py"
    script.write_text(SCRIPT)
    tuned = _run(script, "((64,), 2)")
    assert tuned.returncode == 0, tuned.stderr[-2000:]
    assert tuned.stdout.split("CALLS")[1].split() == [str(2 * 3 + 1)]  # tuned: 2 configs x 3 runs, then the call
    for call in ("((64,), 2.0)", "(torch.Size([64]), 2)", "((np.int64(64),), np.float32(2.0))", "((64,), 2.0 + 0.0)"):
        done = _run(script, call, TRITON_DIST_AUTOTUNE_CACHE_ONLY="strict")
        assert done.returncode == 0, (call, done.stderr[-2000:])  # a miss would be a CacheMissError
        assert done.stdout.split("CALLS")[1].split() == ["1"], call
    (entry,) = (cache_dir / "scale").glob("*.json")
    assert json.loads(entry.read_text())["key"] == "((64,), 2)"


def test_the_key_text_writes_equal_values_alike_and_keeps_the_others():
    assert stable_key_text(((64,), 2.0)) == stable_key_text(((64,), 2)) == "((64,), 2)"
    assert stable_key_text((-0.0,)) == stable_key_text((0,)) == "(0,)"
    assert stable_key_text((torch.Size([4, 8]), "f16")) == "((4, 8), 'f16')"
    assert stable_key_text({"n": np.int64(3), "s": {2.0, 1.0}}) == "{'n': 3, 's': {1, 2}}"
    # values that are not equal keep their own text
    assert stable_key_text((2.5, float("inf"), np.float32(0.5))) == "(2.5, inf, 0.5)"
    assert stable_key_text((True, "2.0")) == "(True, '2.0')"


def test_cache_why_reads_a_key_written_with_another_equal_number():
    from triton_dist._cli.why import _key_text

    assert _key_text("[[64], 2.0]") == _key_text("((64,), 2)") == "((64,), 2)"


def test_numpy_bools_strings_and_nans_as_a_tester_wrote_them():
    """np.bool_ and np.str_ equal their Python values; a NaN of np.float32/np.float16 (no float
    subclass) was taken, tuned, then refused at the next call with advice about __eq__ (a tester)."""
    from triton_dist.errors import KeyFunctionError

    assert stable_key_text((np.bool_(True), np.str_("a"))) == stable_key_text((True, "a")) == "(True, 'a')"
    assert stable_key_text((True, 1)) == "(True, 1)"  # equal in Python, written apart (docs/cache.md)
    from decimal import Decimal

    for nan in (np.float32("nan"), np.float16("nan"), float("nan"), Decimal("NaN"), complex("nan+1j")):
        with pytest.raises(KeyFunctionError, match="NaN"):
            stable_key_text((4, nan))


def test_cache_why_reads_the_reprs_numpy_and_torch_print():
    from triton_dist._cli.why import _key_text

    assert _key_text("(np.int64(3), torch.Size([2, 3]), np.float16(2.0), np.True_)") == "(3, (2, 3), 2, True)"
    assert _key_text("('np.int64(3)',)") == "('np.int64(3)',)"  # a string that holds such text stays
