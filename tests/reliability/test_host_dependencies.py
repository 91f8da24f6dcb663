"""What a host function's entry depends on beyond its source and kernels, across processes (2026-12-06).

An entry is valid for the code it was tuned for. A second process, after an edit of something the
host function's configs or code use but the hashes did not cover, hit the first one's entry:

- a ``triton.Config``'s ``pre_hook`` (and a function that is a config's value) was written by its
  name alone: its edited body hit the old entry;
- a module constant the host function reads (``ADD = 1``, passed to the kernel) was not hashed;
- two modules holding one function name and source (``fused_op``) named one entry (the module
  is out of the identity, so that ``python train.py`` hits what a campaign importing ``train``
  tuned): reading constants that differ, the second took or re-tuned over the first's entry;
  with only their spaces differing, they still share it, and re-tuning over it is now said.

Each edit now makes the configs that hold it (or the function) tuned again; an unedited function
still hits — also one reading a constant derived from the environment (a rank: by its statement,
not its value) and a flag some function sets (state, not a constant), and one whose entry another
Python version wrote (Python's version is recorded, not compared: docs/cache.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.helpers import env_for

OPS = textwrap.dedent('''
    import os
    from collections import Counter

    import torch
    import triton
    import triton.language as tl

    from triton_dist.tune import autotune

    calls = Counter()
    ADD = 1
    SHARD = int(os.environ.get("HDEPS_SHARD", "0"))  # differs between processes, as a rank does
    _ready = False


    def get_ready():
        global _ready
        _ready = True


    @triton.jit
    def add(x_ptr, y_ptr, n, K: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + K, mask=offs < n)


    def launch(x, k, block):
        y = torch.empty_like(x)
        add[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), K=k, BLOCK=block)
        return y


    def key_fn(x, *args, **kwargs):
        return (x.numel(),)


    def prepare_hook(nargs):
        nargs["x"].add_(0)  # hook


    def prepare_value(x):
        return x + 0  # value


    @autotune(config_space=[{"cfg": triton.Config({"BLOCK": b}, pre_hook=prepare_hook)} for b in (32, 64)],
              key_fn=key_fn, n_warmup=0, n_repeat=1)
    def hooked(x, cfg):
        calls["hooked"] += 1
        x = x.clone()
        cfg.pre_hook({"x": x})
        return launch(x, 1, cfg.kwargs["BLOCK"])


    @autotune(config_space=[{"BLOCK": b, "prep": prepare_value} for b in (32, 64)], key_fn=key_fn,
              n_warmup=0, n_repeat=1)
    def picked(x, BLOCK, prep):
        calls["picked"] += 1
        return launch(prep(x), 1, BLOCK)


    @autotune(config_space=[{"BLOCK": 32}, {"BLOCK": 64}], key_fn=key_fn, n_warmup=0, n_repeat=1)
    def reads_constant(x, BLOCK):
        calls["reads_constant"] += 1
        return launch(x, ADD, BLOCK)


    @autotune(config_space=[{"BLOCK": 32}, {"BLOCK": 64}], key_fn=key_fn, n_warmup=0, n_repeat=1)
    def unedited(x, BLOCK):
        calls["unedited"] += 1
        return launch(x, 1 + SHARD * 0 + int(_ready) * 0, BLOCK)
''')

# two model files, one function name and source; only their module-level values differ
MODEL = textwrap.dedent('''
    from collections import Counter

    from hdeps.ops import key_fn, launch
    from triton_dist.tune import autotune

    calls = Counter()
    SCALE = {scale}
    SPACE = [{{"BLOCK": b}} for b in {blocks}]  # model_a: 32 and 64; model_b: 128 too


    @autotune(config_space=SPACE, key_fn=key_fn, n_warmup=0, n_repeat=1)
    def fused_op(x, BLOCK):
        calls["fused_op"] += 1
        return launch(x, SCALE, BLOCK)


    @autotune(config_space=SPACE, key_fn=key_fn, n_warmup=0, n_repeat=1)
    def shared_op(x, BLOCK):
        calls["shared_op"] += 1
        return launch(x, 1, BLOCK)
''')

RUN = textwrap.dedent('''
    import importlib
    import json
    import os
    import sys
    import warnings

    import torch

    x = torch.zeros(100)
    out = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in sys.argv[1:]:
            module, _, function = name.rpartition(".")
            module = importlib.import_module(module)
            if function == "unedited" and os.environ.get("HDEPS_SHARD") == "1":
                module.get_ready()  # a flag set before the first call, in this process only
            out[name] = [float(getattr(module, function)(x).sum()), module.calls[function]]
    out["warnings"] = [str(w.message) for w in caught]
    print("RESULT", json.dumps(out))
''')

OPS_FUNCTIONS = ["hdeps.ops.hooked", "hdeps.ops.picked", "hdeps.ops.reads_constant", "hdeps.ops.unedited"]

# each edit changes what its function computes (+100 over the 100 elements)
EDITS = {
    "hdeps.ops.hooked": ("ops.py", 'add_(0)  # hook', 'add_(1)  # hook'),
    "hdeps.ops.picked": ("ops.py", "x + 0  # value", "x + 1  # value"),
    "hdeps.ops.reads_constant": ("ops.py", "ADD = 1", "ADD = 2"),
}


def _run(project: Path, cache: Path, *functions: str, **env: str) -> dict:
    done = subprocess.run([sys.executable, "-c", RUN, *functions], cwd=project, env=env_for(cache, project, **env),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.split("RESULT", 1)[1])


def _entries(cache: Path, function: str) -> list[Path]:
    return sorted((cache / function).glob("*.json"))


def _project(tmp_path: Path) -> Path:
    package = tmp_path / "hdeps"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "ops.py").write_text(OPS)
    (package / "model_a.py").write_text(MODEL.format(scale=1, blocks=(32, 64)))
    (package / "model_b.py").write_text(MODEL.format(scale=2, blocks=(32, 64, 128)))
    return package


@pytest.mark.timeout(600)
def test_an_edit_of_a_hook_a_config_function_or_a_module_constant_is_a_miss_in_the_next_process(
        tmp_path, cache_dir):
    package = _project(tmp_path)
    first = _run(tmp_path, cache_dir, *OPS_FUNCTIONS)
    assert all(first[name][1] >= 3 for name in OPS_FUNCTIONS), first  # tuned: each config, then the call
    # Python's version is recorded, not compared: an entry another Python wrote still serves
    (unedited_entry,) = _entries(cache_dir, "unedited")
    entry = json.loads(unedited_entry.read_text())
    entry["versions"]["python"] = "3.10.99"
    unedited_entry.write_text(json.dumps(entry))

    for name, (file, old, new) in EDITS.items():
        text = (package / file).read_text()
        assert text.count(old) == 1, (name, old)
        (package / file).write_text(text.replace(old, new))
    second = _run(tmp_path, cache_dir, *OPS_FUNCTIONS, HDEPS_SHARD="1", TRITON_DIST_AUTOTUNE_VERSION_CHECK="1")
    assert {name: second[name][0] - first[name][0] for name in EDITS} == dict.fromkeys(EDITS, 100)  # edits took effect
    # each edited function tuned again (every config ran), never the entry of the code before
    stale = [name for name in EDITS if second[name][1] < 3]
    assert stale == [], second
    # a hit: the call alone, though the constant it reads from the environment and a flag differ
    assert second["hdeps.ops.unedited"] == first["hdeps.ops.unedited"][:1] + [1], second
    assert not any("unedited" in w for w in second["warnings"]), second["warnings"]

    third = _run(tmp_path, cache_dir, *EDITS)  # the edited code's entries serve it
    assert [third[name][1] for name in EDITS] == [1] * len(EDITS), third


@pytest.mark.timeout(600)
def test_two_modules_with_one_function_name_and_source_keep_their_entries_or_are_told(tmp_path, cache_dir):
    _project(tmp_path)
    first = _run(tmp_path, cache_dir, "hdeps.model_a.fused_op", "hdeps.model_a.shared_op")
    # model_b's space grew over model_a's; its fused_op reads another SCALE, its shared_op nothing
    second = _run(tmp_path, cache_dir, "hdeps.model_b.fused_op", "hdeps.model_b.shared_op")
    assert second["hdeps.model_b.fused_op"][0] == first["hdeps.model_a.fused_op"][0] + 100
    third = _run(tmp_path, cache_dir, "hdeps.model_a.fused_op", "hdeps.model_b.fused_op")
    problems = []
    # fused_op reading constants that differ: an entry each, not one they take or re-tune over
    if len(_entries(cache_dir, "fused_op")) != 2:
        problems.append(f"fused_op: {len(_entries(cache_dir, 'fused_op'))} entry file(s)")
    if [third[f"hdeps.{m}.fused_op"][1] for m in ("model_a", "model_b")] != [1, 1]:
        problems.append(f"fused_op re-tuned in the third process: {third}")
    # shared_op differing only in its space shares the entry: re-tuning over it is said
    said = [w for w in second["warnings"] if "hdeps.model_a.shared_op" in w and "re-tuning over" in w]
    if not said or "hdeps.model_b.shared_op" not in said[0]:
        problems.append(f"shared_op re-tuned over model_a's entry unsaid: {second['warnings']}")
    assert problems == []
