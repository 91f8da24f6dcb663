"""Triton's per-process start-up work runs in the background when a function is decorated
(issue 23, P8): a fresh process then finds Triton's installation hash already computed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import json, sys, threading, time
    import triton
    from triton.runtime.cache import triton_key
    from triton_dist import _triton_prewarm
    from triton_dist.tune import autotune
    from triton_dist.autotuner import contextual_autotune
    from triton_dist._measure.method import measuring_code

    before = triton_key.cache_info().currsize
    digest_before = measuring_code.cache_info().currsize
    names_before = {t.name for t in threading.enumerate()}
    if sys.argv[1] == "tune":
        autotune([{"BLOCK": 1}], lambda x: (x,))(lambda x, BLOCK: x)
    else:
        contextual_autotune()(lambda: None)
    started = "triton-dist-prewarm" in {t.name for t in threading.enumerate()} - names_before
    _triton_prewarm.wait(60)
    print(json.dumps({"before": before, "after": triton_key.cache_info().currsize, "started": started,
                      "key": triton_key(), "digest_before": digest_before,
                      "digest_after": measuring_code.cache_info().currsize, "digest": measuring_code()}))
""")


def _child(mode: str, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TRITON_DIST_PREWARM")}
    environ.update(env)
    out = subprocess.run([sys.executable, "-c", CHILD, mode], env=environ, capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["tune", "contextual"])
def test_decorating_computes_tritons_installation_hash_in_the_background(mode):
    result = _child(mode)
    assert result["before"] == 0 and result["started"] and result["after"] == 1
    # and the measuring code's digest, which a first miss reads before it measures (session 33)
    assert (result["digest_before"], result["digest_after"]) == (0, 1)
    # the values their own calls return afterwards are the ones they compute themselves
    plain = _child(mode, TRITON_DIST_PREWARM="0")
    assert plain["key"] == result["key"] and plain["digest"] == result["digest"]


def test_prewarm_off_and_under_the_interpreter_starts_nothing():
    for env in ({"TRITON_DIST_PREWARM": "0"}, {"TRITON_INTERPRET": "1"}):
        result = _child("tune", **env)
        assert (result["started"], result["before"], result["after"]) == (False, 0, 0), env
