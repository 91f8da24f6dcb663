"""Hostile but legal inputs to the newest code, through the public API in real processes (2026-12-06).

Module constants in the source hash (``_store/constants.py``, ``_store/bindings.py``): a host
function reads ``BLOCK`` written in a way the line-based walker misread — ``A = 1; BLOCK = 128``, a
``\\`` continuation, after a line ending in a comma or a string holding three quotes, a local of
the same name in a function defined in an ``if`` block or after a column-0 string, a name in
another Unicode form, ``global BLOCK`` in a docstring, re-exported through four and five modules,
imported from a zip. Each counted by its name alone (or not at all): after an edit of the literal,
a second process hit the entry of the code before and ran with a config tuned for other code.
Now each edit is a miss, an unedited module a hit; and two gloo ranks whose modules make values of
their own (a rank, a leader's buffer, a lazily set flag) hash alike.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.cli.helpers import env_for
from tests.distributed.harness import run_ranks

# per case: files of a package ``hn_<case>`` (its ``ops.py`` holds the host), the literal edited
_HOST = '''
from collections import Counter

from triton_dist.tune import autotune

calls = Counter()


@autotune(config_space=[{"c": 1}, {"c": 2}], key_fn=lambda n: (n,), n_warmup=0, n_repeat=1)
def host_NAME(n, c):
    calls["host"] += 1
    return n + BLOCK + 0 * c
'''

CASES: dict[str, dict[str, str]] = {
    "semicolon": {"ops.py": "import os; BLOCK = 128\n"},
    "continuation": {"ops.py": "BLOCK = \\\n    128\n"},
    "after_a_tuple_line": {"ops.py": "SIZES = 1, 2,\nBLOCK = 128\n"},
    "after_three_quotes_in_a_string": {"ops.py": "DELIM = '\"\"\"'\nBLOCK = 128\n"},
    "local_in_a_def_in_an_if": {"ops.py": "import sys\nBLOCK = 128\nif sys:\n    def f():\n        BLOCK = 3\n"
                                          "        return BLOCK\n"},
    "local_after_a_column_0_string": {"ops.py": 'BLOCK = 128\n\n\ndef f():\n    s = """\nSELECT 1\n"""\n'
                                                "    BLOCK = 3\n    return s, BLOCK\n"},
    "fullwidth_name": {"ops.py": "ＢＬＯＣＫ = 128\n"},
    "global_in_a_docstring": {"ops.py": '"""Ops.\n\nglobal BLOCK\n  the block size\n"""\nBLOCK = 128\n'},
    "reexported_4": {"ops.py": "from .r1 import BLOCK\n", "r1.py": "from .r2 import BLOCK\n",
                     "r2.py": "from .r3 import BLOCK\n", "r3.py": "from .r4 import BLOCK\n", "r4.py": "BLOCK = 128\n"},
    "reexported_5": {"ops.py": "from .r1 import *\n", "r1.py": "from .r2 import *\n",
                     "r2.py": "from .r3 import BLOCK\n", "r3.py": "from .r4 import BLOCK\n",
                     "r4.py": "from .r5 import BLOCK\n", "r5.py": "BLOCK = 128\n"},
    "imported_from_a_zip": {"ops.py": "from hn_zipped_consts import BLOCK\n"},  # hn_zipped_consts: in consts.zip
    # judged right before (kept: no regression): star import with __all__, a package __init__,
    # an annotated Final, a decorated dataclass holding BLOCK, a match statement, f-strings
    "star_all": {"ops.py": "from .c import *\n", "c.py": "__all__ = ['BLOCK']\nBLOCK = 128\nOTHER = 1\n"},
    "package_init": {"__init__.py": "BLOCK = 128\n", "ops.py": "from . import BLOCK\n"},
    "final_dataclass_match_fstring": {"ops.py": textwrap.dedent('''\
        import dataclasses
        import sys
        from typing import Final

        W = 3
        TEXT = f'{"a"}{W!r:>{W}}' f"{'b'}"


        @dataclasses.dataclass
        class Cfg:
            BLOCK: int = 3


        match sys.platform:
            case "never":
                MODE = 1
            case _:
                MODE = 2
        BLOCK: Final[int] = 128
    ''')},
}

RUN = textwrap.dedent('''
    import importlib, json, sys
    out = {}
    for case in sys.argv[1:]:
        ops = importlib.import_module(f"hn_{case}.ops")
        out[case] = [getattr(ops, f"host_{case}")(1), ops.calls["host"]]
    print("RESULT", json.dumps(out))
''')


def _write(tmp_path: Path, block: int) -> None:
    for case, files in CASES.items():
        package = tmp_path / f"hn_{case}"
        package.mkdir(exist_ok=True)
        files = {"__init__.py": "", **files}
        for name, text in files.items():
            text = text.replace("128", str(block))
            if name == "ops.py":
                text += _HOST.replace("NAME", case)
            (package / name).write_text(text)
    with zipfile.ZipFile(tmp_path / "consts.zip", "w") as archive:
        archive.writestr("hn_zipped_consts.py", f"BLOCK = {block}\n")


def _run(tmp_path: Path, cache: Path) -> dict:
    env = env_for(cache, tmp_path)
    env["PYTHONPATH"] = f"{tmp_path / 'consts.zip'}:{env['PYTHONPATH']}"
    done = subprocess.run([sys.executable, "-c", RUN, *CASES], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.split("RESULT", 1)[1])


@pytest.mark.timeout(600)
def test_an_edited_module_constant_written_in_any_legal_way_is_a_miss_in_the_next_process(tmp_path, cache_dir):
    _write(tmp_path, 128)
    first = _run(tmp_path, cache_dir)
    assert first == {case: [129, 3] for case in CASES}  # tuned: each config, then the call
    assert _run(tmp_path, cache_dir) == {case: [129, 1] for case in CASES}  # unedited: a hit each
    _write(tmp_path, 256)
    edited = _run(tmp_path, cache_dir)
    stale = sorted(case for case in CASES if edited[case] != [257, 3])  # a hit here: the old entry served
    assert stale == [], edited


RANK_MODULE = textwrap.dedent('''
    import os

    import torch

    from triton_dist.tune import autotune

    RANK = int(os.environ["RANK"]); BLOCK = 128
    LEADER_BUFFER = torch.zeros(4) if RANK == 0 else None
    try:
        DEVICE_NAME = f"cpu:{os.environ['LOCAL_RANK']}"
    except KeyError:
        DEVICE_NAME = "cpu"
    _ready = False
    SIZES = RANK, 2,


    def get_ready():
        global _ready
        _ready = True


    @autotune(config_space=[{"c": 1}, {"c": 2}], key_fn=lambda n: (n,), n_warmup=0, n_repeat=1)
    def ranked(n, c):
        return n + BLOCK + RANK * 0 + len(DEVICE_NAME) * 0 + int(_ready) * 0 + SIZES[1] * 0
''')


def _ranked(rank: int, world_size: int, modules: str) -> int:
    import torch.distributed as dist

    sys.path.insert(0, modules)
    import hn_ranked

    if rank == 1:
        hn_ranked.get_ready()
    return hn_ranked.ranked(1, autotune_pg=dist.group.WORLD)


@pytest.mark.timeout(300)
def test_two_ranks_whose_modules_make_values_of_their_own_hash_alike(tmp_path):
    (tmp_path / "hn_ranked.py").write_text(RANK_MODULE)
    env = {"TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "cache"), "TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S": "20"}
    results = run_ranks(_ranked, 2, env=env, args=(str(tmp_path),), tmp=tmp_path)
    assert results == [{"ok": 129}, {"ok": 129}], results
    assert len(list((tmp_path / "cache" / "ranked").glob("*.json"))) == 1
