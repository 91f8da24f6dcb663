"""Host functions of other Triton projects made ``tune.autotune`` targets (a tester, 2026-12-05):
vLLM's and SGLang's fused_moe (a config dict chosen by shape and dtype, keyed by ``torch.Size``,
dtype strings, ``None`` and block shapes), Liger-Kernel's cross entropy (its gradient written over
the input), FlagGems' configs read from YAML, flash-attention's ``pre_hook=init_to_zero(...)``.
Each against a torch reference and the host's own untuned call; a second process hits every entry
and prints nothing of its own. Judged correct as they are; these tests keep them so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from unit import ecosystem_hosts as H


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_DIST_DEVICE", "cpu")
    for tuner, _, _ in H.calls().values():
        tuner.clear()  # each test's cache root starts empty: so do the decisions in memory


def test_a_fused_moe_host_keyed_as_vllm_keys_tunes_each_key_against_the_reference(capsys) -> None:
    x, w1, wts, ids = H.moe_inputs()
    reference = H.moe_reference(x, w1, wts, ids)
    torch.testing.assert_close(H.fused_experts(x, w1, wts, ids), reference)  # the host's own choice
    keys = set()
    for kwargs in ({}, {"dtype": "fp8_w8a8", "block_shape": [128, 128]}, {"dtype": None, "block_shape": None}):
        torch.testing.assert_close(H.tuned_fused_experts(x, w1, wts, ids, **kwargs), reference)
        assert H.tuned_fused_experts.best_config(x, w1, wts, ids, **kwargs) in H.MOE_SPACE
        keys.add(H.moe_key(x, w1, wts, ids, **kwargs))
    assert len(keys) == 2 and len(H.tuned_fused_experts.tuner._origins) == 2  # None and None: one key
    xh, w1h, wtsh, idsh = H.moe_inputs(dtype=torch.float16)
    torch.testing.assert_close(H.tuned_fused_experts(xh, w1h, wtsh, idsh), H.moe_reference(xh, w1h, wtsh, idsh),
                               atol=2e-2, rtol=2e-2)
    assert len(H.tuned_fused_experts.tuner._origins) == 3  # the torch dtype is in the key
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_a_host_taking_its_config_as_var_keywords_gets_the_fields_as_sglang_launches_them() -> None:
    x, w1, wts, ids = H.moe_inputs()
    torch.testing.assert_close(H.sglang_experts(x, w1, wts, ids), H.moe_reference(x, w1, wts, ids))
    assert H.sglang_experts.best_config(x, w1, wts, ids)["BLOCK_SIZE_N"] in (16, 32)


def test_an_in_place_gradient_is_written_once_and_matches_torch() -> None:
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(1))
    target = torch.tensor([3, 7, -100, 49, 0, 11])
    loss_ref, grad_ref = H.cross_entropy_reference(logits, target)
    stock = logits.clone()
    loss, grad = H.cross_entropy_forward(stock, target)
    torch.testing.assert_close((loss, grad), (loss_ref, grad_ref))
    tuned = logits.clone()
    loss, grad = H.tuned_cross_entropy(tuned, target)  # 2 configs x 15 runs over the same logits
    assert grad is tuned
    torch.testing.assert_close((loss, grad), (loss_ref, grad_ref))


def test_configs_from_yaml_and_configs_with_hooks_of_every_kind() -> None:
    x = torch.randn(100, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(H.yaml_accumulate(x, torch.empty_like(x)), x)
    assert H.yaml_accumulate.best_config(x, x)["meta"]["block_shape"] in ([16, 16], [32, 32])
    torch.testing.assert_close(H.hooked_accumulate(x, torch.full_like(x, 7.0)), x)  # the hook cleared the 7s
    assert H.hooked_accumulate.best_config(x, x)["cfg"].kwargs["BLOCK"] in (16, 32, 64)


def test_a_second_process_hits_every_entry_and_prints_nothing_of_its_own(cache_dir: Path) -> None:
    H.main()  # tunes each call here (its JSON on stdout is this test's, not checked)
    tests = str(Path(__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "unit.ecosystem_hosts"], capture_output=True, text=True,
                          timeout=280, env=env, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == ""
    seen = json.loads(done.stdout)  # nothing on stdout but the module's own line
    assert set(seen) == set(H.calls())
    missed = {name: origin for name, origin in seen.items() if not origin.startswith("loaded from the cache entry")}
    assert not missed, missed


def test_cache_why_reads_a_key_as_python_prints_a_vllm_style_key(cache_dir: Path) -> None:
    """A key of ``torch.Size`` and torch dtypes, pasted into ``cache why`` as ``print(key)`` writes
    it (``(torch.Size([4, 40, 24]), 2, None, 5, torch.float32, None)``), was compared as that
    text: torch.Size was read only where the rest was a literal, and a dtype never is, so `why`
    said MISS ('the entry is for key ((4, 40, 24), 2, None, 5, torch.float32, None)') for a key
    the call hits. Now it is read as the call writes it (``2.0`` as ``2`` too)."""
    from triton_dist._cli.why import _key_text
    from triton_dist._store.keytext import stable_key_text

    x, w1, wts, ids = H.moe_inputs()
    key = H.moe_key(x, w1, wts, ids)
    assert _key_text(repr(key)) == stable_key_text(key) == "((4, 40, 24), 2, None, 5, torch.float32, None)"
    assert _key_text("(torch.Size([4]), 2.0, torch.bfloat16, 'torch.float16')") == \
        "((4,), 2, torch.bfloat16, 'torch.float16')"
    H.tuned_fused_experts(x, w1, wts, ids)
    tests = str(Path(__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "triton_dist.cache", "why", "unit.ecosystem_hosts:tuned_fused_experts",
                           repr(key)], capture_output=True, text=True, timeout=200, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "HIT" in done.stdout
