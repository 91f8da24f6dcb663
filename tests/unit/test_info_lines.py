"""An operator's ``logging.basicConfig(level=logging.INFO)`` sees each tuning (a tester,
2026-12-05: a long tuning said nothing at INFO without ``autotune_verbose``, its lines were all
DEBUG records): one start line (function, key, how many configs) and one result line (the pick,
its time, the tuning's wall time) per tuning, no line per config, nothing on a hit. Each record
carries ``rank``, ``world_size``, ``function`` and ``key`` as fields (``extra``) for a JSON
formatter. Importing the package configures no logging. Fresh processes: a first one tunes two
keys, a second one finds both in the cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, logging, sys

import triton_dist, triton_dist.autotuner, triton_dist.tune  # noqa: F401
from triton_dist.tune import autotune

# importing configured nothing: no handler, no level
print(json.dumps([len(logging.getLogger().handlers), logging.getLogger().level,
                  len(logging.getLogger("triton_dist").handlers), logging.getLogger("triton_dist").level,
                  len(logging.getLogger("triton_dist.tune").handlers), logging.getLogger("triton_dist.tune").level]))


class Json(logging.Formatter):
    def format(self, record):
        return json.dumps({"level": record.levelname, "name": record.name, "message": record.getMessage(),
                           **{k: getattr(record, k, "MISSING") for k in ("rank", "world_size", "function", "key")}})


logging.basicConfig(level=logging.INFO)
logging.getLogger().handlers[0].setFormatter(Json())


@autotune([{"b": b} for b in (1, 2, 3)], key_fn=lambda n: (n,), n_warmup=1, n_repeat=2)
def op(n, b):
    return n * b


print(op(3), op(3), op(4), op(3, autotune_verbose=True) is not None)
"""


def _run(tmp_path: Path) -> tuple[list, list[dict]]:
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    first, _, rest = done.stdout.partition("\n")
    records = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert all(line.startswith("{") for line in done.stderr.splitlines()), done.stderr  # nothing unformatted
    return json.loads(first), records


def test_a_tuning_says_its_start_and_result_at_info_and_a_hit_nothing(tmp_path):
    configured, records = _run(tmp_path)
    assert configured == [0, 30, 0, 0, 0, 0]  # the root's WARNING level, nothing of triton_dist's
    assert [r["level"] for r in records] == ["INFO"] * 4 and {r["name"] for r in records} == {"triton_dist.tune"}
    for (start, result), key in zip([records[:2], records[2:]], ["(3,)", "(4,)"], strict=True):
        assert f"tuning __main__.op for key {key} " in start["message"], start
        assert "3 of 3 configs kept" in start["message"], start
        assert result["message"].startswith(f"__main__.op: best config for key {key}: "), result
        assert " ms, margin " in result["message"] and ", tuned in " in result["message"], result
        for record in (start, result):
            assert (record["rank"], record["world_size"], record["function"], record["key"]) == \
                (None, None, "__main__.op", key), record
    # a second process: both keys are cache hits, and a hit says nothing at INFO
    # (its verbose line, asked for, is a DEBUG record: not shown)
    again, records = _run(tmp_path)
    assert records == [], records
