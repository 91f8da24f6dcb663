"""Which function an entry is for (a tester, 2026-12-04).

Methods of two classes written alike (``return self.impl(x, B)``) had one source hash, so the
second class took the first one's entry as a hit, a config 20x slower for it, and once told apart
it still borrowed the first one's timings as an "older version" of itself. Two modules' functions
of one name and source over module-level spaces that differ share one entry: that is said.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import pytest
import torch

from triton_dist.errors import TritonDistWarning
from triton_dist.tune import autotune

SPACE = [{"b": 1}, {"b": 2}]


def _key(self, x, *args, **kwargs):
    return (tuple(x.shape),)


class PrefersOne:
    def impl(self, x, b):
        time.sleep(0.001 if b == 1 else 0.02)
        return x * b

    @autotune(config_space=SPACE, key_fn=_key, n_warmup=1, n_repeat=2)
    def forward(self, x, b):
        return self.impl(x, b)


class PrefersTwo:
    def impl(self, x, b):
        time.sleep(0.001 if b == 2 else 0.02)
        return x * b

    @autotune(config_space=SPACE, key_fn=_key, n_warmup=1, n_repeat=2)
    def forward(self, x, b):
        return self.impl(x, b)


@pytest.mark.timeout(120)
def test_methods_of_two_classes_written_alike_are_two_functions(cache_dir):
    x = torch.ones(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TritonDistWarning)
        PrefersOne().forward(x)
        PrefersTwo().forward(x)
    assert PrefersOne.forward.best_config(PrefersOne(), x) == {"b": 1}
    assert PrefersTwo.forward.best_config(PrefersTwo(), x) == {"b": 2}  # its own, not a hit or a reuse
    entries = sorted((cache_dir / "forward").glob("*.json"))
    assert len(entries) == 2


MODULE = """
from triton_dist.tune import autotune
SPACE = [{{"b": b}} for b in {space}]
def key_fn(n):
    return (n,)
@autotune(config_space=SPACE, key_fn=key_fn, n_warmup=0, n_repeat=1)
def op(n, b):
    return n * b
"""


def test_two_modules_sharing_one_entry_are_told_why_it_keeps_being_replaced(cache_dir, tmp_path, monkeypatch):
    for name, space in (("mod_pa", (1, 2)), ("mod_pb", (3, 4))):
        (tmp_path / f"{name}.py").write_text(MODULE.format(space=space))
    monkeypatch.syspath_prepend(str(tmp_path))
    import mod_pa
    import mod_pb

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TritonDistWarning)
        mod_pa.op(5)
    with pytest.warns(TritonDistWarning, match=r"written by mod_pa\.op, a function of the same name and "
                                               r"source as mod_pb\.op.*give them different names"):
        mod_pb.op(5)
    assert Path(cache_dir / "op").is_dir()


DECORATED = """
import functools, sys
from triton_dist.tune import autotune

def traced(fn):
    @functools.wraps(fn)
    def wrapper(*a, **k):
        return fn(*a, **k)
    return wrapper

class Cfg:
    pass

MARK = Cfg()

def act(x):
    return x

@autotune(config_space=[{"b": 1, "act": act}, {"b": 2, "act": functools.partial(act)}], key_fn=lambda n, **k: (n,))
@traced
def scale(n, b, act, mark=MARK):
    return n * b

if __name__ == "__main__":
    import json
    print("HASH", scale.target.source_hash() + json.dumps(scale.target.encoded))
"""


def test_a_script_run_as_main_has_the_hash_its_import_has(tmp_path):
    """A function under ``@autotune`` wrapped by a ``functools.wraps`` decorator captures the
    original, whose module went into the hash (and a function in a config was written with its
    module, a tester): ``python trainmod.py`` (``__main__``) missed every
    entry a campaign seeded by importing ``trainmod`` (a reviewer, 2026-12-04); ``python
    pkg/trainmod.py`` against ``pkg.trainmod`` too."""
    import os
    import subprocess
    import sys

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "trainmod.py").write_text(DECORATED)
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), str(tmp_path), str(package)])}

    def hashes(*command: str) -> str:
        done = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=120,
                              cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split("HASH")[1].strip()

    as_script = hashes(str(package / "trainmod.py"))
    imported = hashes("-c", "import json, trainmod as m; print('HASH', m.scale.target.source_hash() + "
                            "json.dumps(m.scale.target.encoded))")
    in_package = hashes("-c", "import json, pkg.trainmod as m; print('HASH', m.scale.target.source_hash() + "
                              "json.dumps(m.scale.target.encoded))")
    as_module = hashes("-m", "pkg.trainmod")
    assert as_script == imported == in_package == as_module
