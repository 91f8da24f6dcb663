"""``_measure.method.measuring_code``: the digest of the code that times candidates, which timing
reuse compares (an entry measured by other measuring code is measured again). Read from copies of
the package in other processes, as a campaign's actors and a training job each read their own."""

from __future__ import annotations

import compileall
import os
import shutil
import subprocess
import sys
from pathlib import Path

import triton_dist

PRINT = "from triton_dist._measure.method import measuring_code; import triton_dist; " \
        "print(measuring_code(), triton_dist.__file__)"


def _copy(where: Path, *, seconds: bool = True, sourceless: bool = False) -> Path:
    package = where / "triton_dist"
    shutil.copytree(Path(triton_dist.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    timer = package / "_backends" / "cpu.py"
    text = timer.read_text()
    assert "times.append((clock() - start) / 1e6)" in text
    if not seconds:  # another measuring code: the CPU timer's unit
        timer.write_text(text.replace("times.append((clock() - start) / 1e6)", "times.append((clock() - start) / 1e3)"))
    if sourceless:  # an image that ships the timing code compiled only (python -m compileall -b, .py removed)
        for sub in ("_measure", "_backends"):
            assert compileall.compile_dir(str(package / sub), legacy=True, quiet=1)
            for source in (package / sub).glob("*.py"):
                source.unlink()
    return where


def _digest(root: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-c", PRINT], env=env, capture_output=True, text=True, timeout=120,
                          cwd=root)
    assert done.returncode == 0, done.stderr
    digest, file = done.stdout.split()
    assert file == str(root / "triton_dist" / "__init__.py")
    return digest


def test_copies_of_one_code_agree_and_another_timer_differs(tmp_path: Path) -> None:
    one, same, other = (_digest(_copy(tmp_path / n, seconds=n != "other")) for n in ("one", "same", "other"))
    assert one == same and one != other


def test_a_sourceless_install_of_other_measuring_code_does_not_read_as_this_ones(tmp_path: Path) -> None:
    """Without .py files the digest was that of no file at all, the same for every sourceless
    install whatever its measuring code: an entry of another timer's unit was reused."""
    seconds = _digest(_copy(tmp_path / "seconds", sourceless=True))
    millis = _digest(_copy(tmp_path / "millis", seconds=False, sourceless=True))
    assert seconds != millis
