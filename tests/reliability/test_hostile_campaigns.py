"""Issue 17: hostile campaign files against ``python -m ray_runner validate`` (items 3, 4, 12).

Each runs the real command in a fresh process with its address space capped at 1 GiB: a
validation that expands a 10^8-case grid or renders a 9^9-node alias tree runs out of it (or
out of the time limit) instead of answering with exit status 2 and a message naming the field.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from ray_runner.spec import MAX_CASES, parse_campaign
from triton_dist.errors import CampaignError

REPO = Path(__file__).resolve().parents[2]
TARGET = {"function": "examples.scale:scale", "args": "examples.scale:make_args"}


def _one_gib() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))


def validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ray_runner", "validate", str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=60, preexec_fn=_one_gib,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def grid_yaml(parameters: int, values: int) -> str:
    grid = ", ".join(f"p{i}: [{', '.join(str(v) for v in range(values))}]" for i in range(parameters))
    return (f"targets:\n  - function: {TARGET['function']}\n    args: {TARGET['args']}\n"
            f"    grid: {{{grid}}}\n")


ALIAS_BOMB = "\n".join(
    [f"{a}: &{a} [{', '.join([f'*{b}'] * 9)}]" for b, a in zip("abcdefgh", "bcdefghi", strict=True)]
)


@pytest.mark.timeout(90)
def test_a_grid_of_10_to_the_8_cases_is_refused_before_it_is_expanded(tmp_path):
    path = tmp_path / "huge-grid.yaml"
    path.write_text(grid_yaml(8, 10))  # ~300 bytes
    assert path.stat().st_size < 400
    done = validate(path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "targets[0].grid is 10 p0 x 10 p1" in done.stderr and "100000000 case(s)" in done.stderr
    assert f"max_cases = {MAX_CASES}" in done.stderr


def test_max_cases_is_the_documented_override():
    data = {"targets": [{**TARGET, "grid": {"a": list(range(400)), "b": list(range(300))}}]}
    with pytest.raises(CampaignError, match="120000 cases, more than max_cases = 100000"):
        parse_campaign(data)
    assert len(parse_campaign({**data, "max_cases": 120_000}).cases()) == 120_000
    with pytest.raises(CampaignError, match="max_cases: must be >= 1"):
        parse_campaign({**data, "max_cases": 0})


@pytest.mark.timeout(90)
def test_an_alias_bomb_is_never_rendered_or_walked_whole(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text("a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + ALIAS_BOMB + "\nname: *i\n"
                    f"targets:\n  - function: {TARGET['function']}\n    args: {TARGET['args']}\n"
                    "    cases: [{x: *i}]\n    grid: {y: *i}\n")
    done = validate(path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "name: must be a file-name-safe string" in done.stderr
    assert "targets[0].cases[0].x: must be a plain value" in done.stderr
    assert "targets[0].grid.y: values must be plain" in done.stderr
    assert max(len(line) for line in done.stderr.splitlines()) < 400  # a glimpse, not the tree


@pytest.mark.timeout(90)
@pytest.mark.parametrize("content, message", [
    ("name: caf\xe9\ntargets: []\n".encode("latin-1"), "is not UTF-8 text"),
    (("x: " + "[" * 5000 + "]" * 5000 + "\n").encode(), "nests too deeply"),
    (b"retries: 1" + b"0" * 5000 + b"\n", "value Python cannot read"),
], ids=["latin-1", "nested-5000", "int-5000-digits"])
def test_unreadable_campaign_files_exit_2_with_a_message(tmp_path, content, message):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    done = validate(path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("error: ") and message in done.stderr
