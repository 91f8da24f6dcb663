"""A warning is printed once, at the user's line (a tester, 2026-12-04).

Every TritonDistWarning was also logged at WARNING on the package's logger; with logging not
configured (no handler anywhere), logging's last resort printed it bare, and then the warning
printed it again, located in ``triton_dist/_face.py`` (``filterwarnings(module=...)`` of user code
never matched). Logging still gets the record where a handler is configured.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import logging, sys
from triton_dist.tune import autotune

if sys.argv[1] == "logging":
    logging.basicConfig(level=logging.WARNING, format="LOGGED %(name)s %(message)s")

@autotune([{"b": 1}, {"b": 2}], lambda n: (n,))
def op(n, b):
    return n * b

print(op(3))  # the user's line
"""


def _run(tmp_path: Path, mode: str) -> subprocess.CompletedProcess:
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "cache"),
           "TRITON_DIST_AUTOTUNE_CACHE_ONLY": "1"}
    done = subprocess.run([sys.executable, "-W", "default", str(script), mode], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def test_a_warning_is_printed_once_at_the_users_line(tmp_path):
    done = _run(tmp_path, "plain")
    assert done.stdout.strip() == "3"
    assert done.stderr.count("config_space[0] is used untuned") == 1, done.stderr
    assert f"{tmp_path / 'user_script.py'}:12: TritonDistWarning" in done.stderr, done.stderr


def test_configured_logging_still_gets_the_record(tmp_path):
    done = _run(tmp_path, "logging")
    assert "LOGGED triton_dist" in done.stderr and "config_space[0] is used untuned" in done.stderr, done.stderr


def test_a_warning_raised_as_an_error_keeps_the_decision(tmp_path, monkeypatch):
    """Under ``python -W error`` (pytest's filterwarnings=error) a warning said during a tuning (an
    unwritable cache, a cache-only miss) threw the decision away: every call tuned again and
    raised again (a tester, 2026-12-04). The warning is raised once the decision is kept."""
    import warnings

    import pytest

    from triton_dist.errors import TritonDistWarning
    from triton_dist.tune import autotune

    root = tmp_path / "file"
    root.write_text("a file where the cache root should be")
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(root))
    calls = []

    @autotune([{"b": 1}, {"b": 2}], lambda n: (n,), n_warmup=1, n_repeat=2)
    def op(n, b):
        calls.append(b)
        return n * b

    with warnings.catch_warnings():
        warnings.simplefilter("error", TritonDistWarning)
        with pytest.raises(TritonDistWarning, match="could not save the tuning result"):
            op(3)
        tuned = len(calls)
        assert tuned == 2 * 3  # two configs, 1 warm-up + 2 timed runs each
        assert op(3) in (3, 6) and len(calls) == tuned + 1  # decided: one call, no tuning, no warning


def test_a_miss_on_another_device_says_why_this_process_has_none(monkeypatch):
    """An NPU node whose CANN environment was not sourced: torch_npu failed to import, the process
    ran on the CPU, and `why` said only "device: 'npu' -> 'cpu'" (a tester, 2026-12-04)."""
    from triton_dist._backends import BACKENDS
    from triton_dist._store.diagnose import _missing_device

    npu = BACKENDS["npu"].load()
    monkeypatch.setattr(npu, "probe", classmethod(lambda cls: "torch_npu cannot be imported: OSError: libhccl.so"))
    assert _missing_device("npu", "cpu") == "; this process found no npu device: torch_npu cannot be imported: " \
                                            "OSError: libhccl.so"
    assert _missing_device("cpu", "cpu") == "" and _missing_device("npu", "npu") == ""
