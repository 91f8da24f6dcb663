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
