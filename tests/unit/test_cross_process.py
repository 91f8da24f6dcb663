"""The disk cache across processes: a second process hits and measures nothing; editing the
decorated function's module file makes the next process tune again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]

MODULE = textwrap.dedent('''
    from collections import Counter

    from triton_dist.tune import autotune

    CALLS = Counter()


    @autotune(config_space=[{"c": 0}, {"c": 1}, {"c": 2}], key_fn=lambda n: ("n", n))
    def work(n, c):
        CALLS[c] += 1
        return n * 10 + c
''')

RUNNER = textwrap.dedent('''
    import json

    import tuned_module

    result = tuned_module.work(4)
    again = tuned_module.work(4)
    print(json.dumps({"result": result, "again": again, "calls": dict(tuned_module.CALLS)}))
''')


def _run(tmp_path, cache_dir, **env):
    # tuned_module from tmp_path; triton_dist from the repository also where it is not installed.
    # work() runs on the host: the CPU backend measures it, also on a machine with a GPU (whose
    # default would replay CUDA graphs of nothing, after a compile pass: not the seed's 5 + 10)
    pythonpath = os.pathsep.join(filter(None, [str(tmp_path), str(REPO), os.environ.get("PYTHONPATH")]))
    full_env = {**os.environ, "TRITON_DIST_AUTOTUNE_DIR": str(cache_dir), "PYTHONPATH": pythonpath,
                "PYTHONDONTWRITEBYTECODE": "1", "TRITON_DIST_DEVICE": "cpu", **env}
    done = subprocess.run([sys.executable, str(tmp_path / "runner.py")], env=full_env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return out, {int(c): n for c, n in out["calls"].items()}


def test_second_process_hits_and_an_edited_module_tunes_again(tmp_path, cache_dir):
    (tmp_path / "tuned_module.py").write_text(MODULE)
    (tmp_path / "runner.py").write_text(RUNNER)

    first, calls = _run(tmp_path, cache_dir)
    best = first["result"] - 40
    assert sum(calls.values()) == 3 * 15 + 2  # tuned, then one call per use
    assert first["again"] == first["result"]
    (entry_file,) = (cache_dir / "work").glob("*.json")
    assert json.loads(entry_file.read_text())["best"]["index"] == best

    second, calls = _run(tmp_path, cache_dir)
    assert second["result"] == first["result"]
    assert calls == {best: 2}  # nothing measured: only the two real calls

    third, calls = _run(tmp_path, cache_dir, TRITON_DIST_AUTOTUNE_ALWAYS_TUNE="1")
    assert sum(calls.values()) == 3 * 15 + 2
    assert len(list((cache_dir / "work").glob("*.json"))) == 1
    assert len(list((cache_dir / "work" / "history").glob("*.json"))) == 1

    (tmp_path / "tuned_module.py").write_text(MODULE.replace("return n * 10 + c", "return c + n * 10"))
    fourth, calls = _run(tmp_path, cache_dir)
    assert sum(calls.values()) == 3 * 15 + 2  # a new source: a miss, tuned again
    assert len(list((cache_dir / "work").glob("*.json"))) == 2
