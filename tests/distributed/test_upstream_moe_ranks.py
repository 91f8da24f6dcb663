"""Upstream Triton-distributed's MoE autotune pattern on 2 real gloo ranks: a kernel wrapped with
``triton.autotune`` after import, launched by its host with the fixed config it was written for
(the tuned symbols among its keywords), the host wrapped with ``contextual_autotune(is_dist=True)``
(upstream_moe_workers.py). Upstream's contextual tuner launches each config over the caller's
keywords; here every rank raised ``ValueError: Conflicting meta-parameters``."""

from __future__ import annotations

import pytest
import upstream_moe_workers
from harness import run_ranks

pytestmark = pytest.mark.timeout(180)


def test_ranks_tune_a_kernel_launched_with_its_fixed_config_and_agree(tmp_path):
    results = run_ranks(upstream_moe_workers.tuned_with_the_fixed_config_passed, 2, timeout_s=120,
                        env={"TRITON_INTERPRET": "1", "TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S": "60",
                             "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "cache")}, tmp=tmp_path)
    assert all("ok" in r for r in results), results
    first, second = (r["ok"] for r in results)
    assert first["correct"] and second["correct"]
    assert first["best"] == second["best"]  # one decision: the MAX over both ranks
    # the kept run launched the tuned BLOCK_SIZE_N; the caller's BLOCK_SIZE_M, which no config sets, stayed
    assert first["meta"] == second["meta"] == [16, first["best_block"]]
