"""A warning's logged copy follows the warnings filters (a tester, 2026-12-05): where logging
is configured, a ``TritonDistWarning`` is also a WARNING record, and that record was written
whatever the filters said: ``filterwarnings("ignore", category=TritonDistWarning)`` still left
it in the log, and a warning the ``"default"`` action shows once was logged on every call. The
record is now written when, and as often as, the warning is shown (or raised, under ``error``),
also for warnings held until a tuning's decision. Each case is a fresh process (``-W`` options,
the registries of a module's warnings)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: warns "said" from three places: a loop (3 calls, one line), another line, another module;
#: then "held" from inside a held_until_decided block (the way a tuning says its warnings)
SCRIPT = r"""
import logging, sys, warnings

from triton_dist._warn import held_until_decided, warn_user
from triton_dist.errors import TritonDistWarning

import other_module

logging.basicConfig(level=logging.WARNING, format="LOGGED %(name)s %(message)s")
log = logging.getLogger("triton_dist.demo")
mode = sys.argv[1]
if mode == "ignore":
    warnings.filterwarnings("ignore", category=TritonDistWarning)
elif mode == "ignore-in-other-module":
    warnings.filterwarnings("ignore", category=TritonDistWarning, module="other_module")
elif mode == "ignore-by-message":
    warnings.filterwarnings("ignore", message="said")


def raised(call):
    try:
        call()
    except TritonDistWarning:
        print("RAISED", file=sys.stderr)


for _ in range(3):
    raised(lambda: warn_user("said", log=log))
raised(lambda: warn_user("said", log=log))
raised(lambda: other_module.say(log))


def held():
    with held_until_decided():
        warn_user("held", log=log)
        print("DECIDED", file=sys.stderr)


raised(held)
"""

OTHER = """
from triton_dist._warn import warn_user

def say(log):
    warn_user("said", log=log)
"""


def _run(tmp_path: Path, mode: str, option: str) -> str:
    (tmp_path / "user_script.py").write_text(SCRIPT)
    (tmp_path / "other_module.py").write_text(OTHER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    done = subprocess.run([sys.executable, "-W", option, str(tmp_path / "user_script.py"), mode],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def _counts(stderr: str, text: str) -> tuple[int, int]:
    """(warnings shown, records logged) of ``text``."""
    return (stderr.count(f"TritonDistWarning: {text}\n"), stderr.count(f"LOGGED triton_dist.demo {text}\n"))


@pytest.mark.parametrize(("mode", "option", "said", "held"), [
    ("ignore", "default", 0, 0),
    ("ignore-by-message", "default", 0, 1),
    ("ignore-in-other-module", "default", 2, 1),  # the loop's line once, the other line once
    ("plain", "default", 3, 1),  # once per line: the loop's, the other line's, the other module's
    ("plain", "module", 2, 1),  # once per module
    # once per process, as documented; CPython's C warnings (3.11) shows it once per module
    ("plain", "once", (1, 2), 1),
    ("plain", "always", 5, 1),
    ("plain", "ignore::DeprecationWarning", 3, 1),  # a filter of another category: the default
], ids=["ignore", "ignore-by-message", "ignore-in-other-module", "default", "module", "once", "always",
        "other-category"])
def test_the_logged_copy_follows_the_filters(tmp_path, mode, option, said, held):
    stderr = _run(tmp_path, mode, option)
    shown, logged = _counts(stderr, "said")
    assert shown == logged and shown in (said if isinstance(said, tuple) else (said,)), stderr
    assert _counts(stderr, "held") == (held, held), stderr
    if held:  # a held warning is shown, and logged, at the end of its block
        assert stderr.index("DECIDED") < stderr.index("LOGGED triton_dist.demo held"), stderr


def test_under_error_each_raised_warning_is_logged(tmp_path):
    stderr = _run(tmp_path, "plain", "error::UserWarning")
    assert stderr.count("RAISED") == 6, stderr  # five "said" and the held one, at its block's end
    assert _counts(stderr, "said") == (0, 5) and _counts(stderr, "held") == (0, 1), stderr
    assert stderr.index("DECIDED") < stderr.index("LOGGED triton_dist.demo held"), stderr


TUNED = r"""
import logging, sys, warnings

from triton_dist.errors import TritonDistWarning
from triton_dist.tune import autotune

logging.basicConfig(level=logging.WARNING, format="LOGGED %(name)s %(message)s")
if sys.argv[1] == "ignore":
    warnings.filterwarnings("ignore", category=TritonDistWarning)

@autotune([{"b": 1}, {"b": 2}], lambda n: (n,))
def op(n, b):
    return n * b

print(op(3), op(4))
"""


@pytest.mark.parametrize("mode", ["ignore", "shown"])
def test_an_ignored_cache_only_miss_is_not_logged(tmp_path, mode):
    """The public path: a cache-only miss (said while the tuner decides, held until then)."""
    (tmp_path / "user_script.py").write_text(TUNED)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "cache"),
           "TRITON_DIST_AUTOTUNE_CACHE_ONLY": "1"}
    done = subprocess.run([sys.executable, "-W", "default", str(tmp_path / "user_script.py"), mode],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "3 4", done.stderr[-3000:]
    logged = [line for line in done.stderr.splitlines() if line.startswith("LOGGED triton_dist")]
    shown = done.stderr.count("TritonDistWarning:")
    if mode == "ignore":
        assert logged == [] and shown == 0, done.stderr
    else:  # one per key, shown and logged alike
        assert shown == 2 and len(logged) == 2 and all("used untuned" in line for line in logged), done.stderr
