"""The module constants a host function reads, and the functions its configs hold, in the hashes
(``triton_dist/_store/constants.py``, ``fingerprint.function_identity``; the cross-process case:
tests/reliability/test_host_dependencies.py).

A constant counts by its value where its module writes it as a literal (or imports it), by its
statement where the module computes it (a rank read from the environment: every rank hashes
alike), and not at all where some function sets it (state); a function that reads no constant
hashes as before, so its entries stay valid.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap

import pytest
import torch
import triton

from triton_dist._store import fingerprint, sources
from triton_dist._store.files import encode_value

MODULE = textwrap.dedent('''
    import os

    import torch

    from hc_consts import IMPORTED

    BLOCK = 128  # literal
    SHAPE = (
        4,
        8,  # (
    )
    RANK = int(os.environ.get("HC_RANK", "0"))
    _calls = 0
    TABLE = [1, 2]


    def count():
        global _calls
        _calls += 1


    class Ops:
        pass


    def host(x, b):
        return x * b + BLOCK + SHAPE[0] + RANK + _calls + IMPORTED


    def plain(x, b):
        return torch.relu(x) * b + TABLE[0] + len(Ops.__name__) + len(x.__class__.__name__)
''')


def _load(tmp_path, name, text=MODULE, consts="IMPORTED = 1\n", module_name=None):
    """``text`` as a module of its own file ``name``.py (named ``module_name``, else ``name``)."""
    (tmp_path / f"{name}.py").write_text(text)
    (tmp_path / "hc_consts.py").write_text(consts)
    sys.modules.pop("hc_consts", None)
    spec = importlib.util.spec_from_file_location(module_name or name, tmp_path / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _path(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(tmp_path))  # for hc_consts
    yield
    sys.modules.pop("hc_consts", None)


def test_what_the_host_reads_counts_by_value_statement_or_not_at_all(tmp_path, monkeypatch):
    module = _load(tmp_path, "hc_a")
    assert fingerprint.constants_read(module.host) == [
        "global BLOCK=128", "global IMPORTED=1", 'global RANK = int(os.environ.get("HC_RANK", "0"))',
        "global SHAPE=(4, 8)"]  # _calls: set by count(), state


def test_a_function_reading_no_constant_hashes_as_before(tmp_path, monkeypatch):
    """Modules, classes, lists, a module's ``__name__`` read as an attribute: nothing counted,
    and the hashes are those computed without constants (the entries written before stay valid)."""
    module = _load(tmp_path, "hc_plain")
    assert fingerprint.constants_read(module.plain) == []
    hashes = fingerprint.source_hash(module.plain), fingerprint.body_hash(module.plain)
    monkeypatch.setattr(sources, "constants_read", lambda fn: [])  # where the hashes read it
    again = _load(tmp_path, "hc_plain_b").plain
    assert (fingerprint.source_hash(again), fingerprint.body_hash(again)) == hashes


def _hash(tmp_path, name, text=MODULE, consts="IMPORTED = 1\n"):
    return fingerprint.source_hash(_load(tmp_path, name, text, consts).host)


def test_an_edited_constant_changes_the_hash_a_reformatted_one_not(tmp_path):
    base = _hash(tmp_path, "hc_base")
    assert _hash(tmp_path, "hc_edit", MODULE.replace("BLOCK = 128", "BLOCK = 256")) != base
    assert _hash(tmp_path, "hc_tuple", MODULE.replace("    8,  # (", "    16,")) != base
    assert _hash(tmp_path, "hc_imported", consts="IMPORTED = 2\n") != base
    assert _hash(tmp_path, "hc_stmt", MODULE.replace('"HC_RANK", "0"', '"HC_RANK", "1"')) != base
    assert _hash(tmp_path, "hc_format", MODULE.replace("BLOCK = 128  # literal", "BLOCK = 0x80")) == base
    # the body hash (timing reuse) moves with it: timings of the code before are not reused
    edited = _load(tmp_path, "hc_body", MODULE.replace("BLOCK = 128", "BLOCK = 256")).host
    assert fingerprint.body_hash(edited) != fingerprint.body_hash(_load(tmp_path, "hc_body_b").host)


def test_a_rank_read_from_the_environment_and_state_a_function_sets_hash_alike(tmp_path, monkeypatch):
    """A value each rank computes for itself would make the ranks of a group hash differently and
    refuse to tune together; a flag or counter differs with what the process did before."""
    monkeypatch.setenv("HC_RANK", "0")
    rank0 = _load(tmp_path, "hc_rank0")
    monkeypatch.setenv("HC_RANK", "3")
    rank3 = _load(tmp_path, "hc_rank3")
    rank3.count()
    assert (rank0.RANK, rank0._calls, rank3.RANK, rank3._calls) == (0, 0, 3, 1)
    assert fingerprint.source_hash(rank3.host) == fingerprint.source_hash(rank0.host)



PER_RANK = {  # values a process makes for itself in ways other than one module-level statement
    "in_a_try_block": """
        import os
        try:
            LOCAL_RANK = int(os.environ["HC_RANK"])
        except KeyError:
            LOCAL_RANK = 0
    """,
    "a_default_then_the_ranks_own": """
        import os
        LOCAL_RANK = 0
        if "HC_RANK" in os.environ:
            LOCAL_RANK = int(os.environ["HC_RANK"])
    """,
    "by_unpacking": """
        import os
        LOCAL_RANK, WORLD = int(os.environ["HC_RANK"]), 2
    """,
    "imported": """
        from hc_consts import LOCAL_RANK
    """,
    "imported_twice_over": """
        from hc_reexport import LOCAL_RANK
    """,
}


@pytest.mark.parametrize("case", sorted(PER_RANK))
def test_a_value_each_rank_makes_for_itself_hashes_alike_on_every_rank(tmp_path, monkeypatch, case):
    """Each of these gave two ranks two hashes (a reviewer, 2026-12-05): the job raised
    RankDisagreementError, and a campaign's actor and the training job named other entries."""
    (tmp_path / "hc_reexport.py").write_text("from hc_consts import LOCAL_RANK\n")
    text = textwrap.dedent(PER_RANK[case]) + "\n\ndef host(x, b):\n    return x * b + LOCAL_RANK\n"
    consts = "import os\nLOCAL_RANK = int(os.environ['HC_RANK'])\n"
    hashes = []
    for rank in ("0", "1"):
        monkeypatch.setenv("HC_RANK", rank)
        sys.modules.pop("hc_reexport", None)
        host = _load(tmp_path, f"hc_{case}_{rank}", text, consts).host
        assert host(0, 1) == int(rank)
        hashes.append((fingerprint.source_hash(host), fingerprint.body_hash(host)))
    sys.modules.pop("hc_reexport", None)
    assert hashes[0] == hashes[1]


def test_a_literal_passed_as_a_keyword_argument_still_counts_by_value(tmp_path):
    """``kernel[grid](x, BLOCK=BLOCK)`` on lines of its own is no assignment of BLOCK."""
    text = textwrap.dedent('''
        BLOCK = 128


        def launch(**kw):
            return kw


        def host(x, b):
            return launch(
                x=x,
                BLOCK=BLOCK,
            )["BLOCK"] * b
    ''')
    module = _load(tmp_path, "hc_kwargs", text)
    assert fingerprint.constants_read(module.host) == ["global BLOCK=128"]
    edited = _load(tmp_path, "hc_kwargs_b", text.replace("BLOCK = 128", "BLOCK = 64"))
    assert fingerprint.source_hash(edited.host) != fingerprint.source_hash(module.host)


def test_an_imported_literal_counts_by_value_and_a_computed_one_by_its_statement(tmp_path):
    text = "from hc_consts import IMPORTED\n\n\ndef host(x, b):\n    return x * b + IMPORTED\n"
    assert fingerprint.constants_read(_load(tmp_path, "hc_imp_a", text).host) == ["global IMPORTED=1"]
    computed = _load(tmp_path, "hc_imp_b", text, consts="import os\nIMPORTED = len(os.sep)\n").host
    assert fingerprint.constants_read(computed) == ["global IMPORTED = hc_consts.IMPORTED = len(os.sep)"]


HOOKS = textwrap.dedent('''
    SCALE = 1


    def zero(nargs):
        nargs["x"].zero_()


    def make(k):
        def act(x):
            return x * k
        return act
''')


def test_a_hook_or_a_function_in_a_config_is_written_with_its_source(tmp_path):
    """Written by its name alone, an edited ``pre_hook`` (or a function that is a config's value)
    was the same config on disk: the entry of the code before hit."""
    def written(module):
        return encode_value(triton.Config({"B": 1}, pre_hook=module.zero)), encode_value(module.zero)

    base = _load(tmp_path, "hc_hooks", HOOKS, module_name="hooks")
    edited = _load(tmp_path, "hc_hooks_b", HOOKS.replace(".zero_()", ".fill_(1)"), module_name="hooks")
    same = _load(tmp_path, "hc_hooks_c", HOOKS, module_name="hooks")
    assert written(base) == written(same)
    assert written(edited)[0] != written(base)[0] and written(edited)[1] != written(base)[1]
    assert "zero source sha256:" in str(written(base)[0])
    # closures of one factory capturing other numbers are other configs; a builtin, a class: by name
    assert encode_value(base.make(2)) != encode_value(base.make(3)) == encode_value(same.make(3))
    assert "sha256" not in str(encode_value(torch.relu)) and "sha256" not in str(encode_value(torch.nn.ReLU))


EDITED_LITERAL = {  # a module-level literal whose edit must change the hash (each did not after 729b38d)
    "a_local_of_the_same_name": """
        BLOCK = 128


        def reference(x):
            BLOCK = 64
            return x[:BLOCK]
    """,
    "a_class_attribute_of_the_same_name": """
        BLOCK = 128


        class Defaults:
            BLOCK = 64
    """,
    "the_name_in_a_docstring": '''
        """Kernels. Example::

            BLOCK = 64
        """
        BLOCK = 128
    ''',
    "a_comment_saying_global": """
        # the host reads the global BLOCK
        BLOCK = 128
    """,
    "a_star_import": """
        from hc_consts import *
    """,
    "a_long_list_of_imported_names": "from hc_consts import (\n"
        + "".join(f"    NAME_NUMBER_{i},\n" for i in range(30)) + "    BLOCK,\n)\n",
    "a_local_loop_variable_and_keyword_arguments": """
        BLOCK = 128


        def reference(x, *blocks):
            for BLOCK in blocks:
                x, y = x, dict(a=1, BLOCK=BLOCK)
            return x
    """,
}


@pytest.mark.parametrize("case", sorted(EDITED_LITERAL))
def test_an_edited_literal_changes_the_hash_whatever_else_the_module_holds(tmp_path, case):
    """An edit of ``BLOCK = 128`` (here or in the module it is imported from) must tune again; a
    local variable, a class attribute or a docstring naming BLOCK, a comment's word "global", a
    star import or a long import list made it count by its name alone, and the entry of the code
    before was hit with a config tuned for another BLOCK."""
    text = textwrap.dedent(EDITED_LITERAL[case]) + "\n\ndef host(x, b):\n    return x * b + BLOCK\n"
    consts = "".join(f"NAME_NUMBER_{i} = {i}\n" for i in range(30)) + "BLOCK = 128\n"
    module = _load(tmp_path, f"hc_{case}", text, consts)
    assert fingerprint.constants_read(module.host) == ["global BLOCK=128"]
    base = fingerprint.source_hash(module.host)  # before the edit: the hashes read the files
    edited = _load(tmp_path, f"hc_{case}_b", text.replace("BLOCK = 128", "BLOCK = 64"),
                   consts.replace("BLOCK = 128", "BLOCK = 64"))  # another size: linecache reads it again
    assert fingerprint.source_hash(edited.host) != base


def test_a_literal_another_module_sets_per_rank_hashes_alike_on_every_rank(tmp_path):
    """``kernels.RANK = dist.get_rank()`` from the job's script: the module writes ``RANK = 0`` and
    each rank holds its own; counted by the value held, two ranks hashed two ways (the job raised
    RankDisagreementError, a campaign's actor that never sets it named another entry)."""
    text = "RANK = 0\n\n\ndef host(x, b):\n    return x * b + RANK\n"
    hashes = []
    for rank in (0, 1, 3):
        module = _load(tmp_path, f"hc_set_{rank}", text)
        module.RANK = rank  # as the job's script sets it
        assert module.host(0, 1) == rank
        hashes.append((fingerprint.source_hash(module.host), fingerprint.body_hash(module.host)))
    assert hashes[0] == hashes[1] == hashes[2]
    assert fingerprint.constants_read(module.host) == ["global RANK=0"]  # the literal as written


def test_a_name_assigned_in_a_module_level_block_or_augmented_still_counts_by_name(tmp_path):
    """What the skipped def/class bodies must not hide: a module-level ``if`` after a function
    still assigns the module's name; ``BLOCK += n`` is not what its literal says."""
    text = textwrap.dedent("""
        import os
        RANK = 0


        def helper():
            return 1


        if "HC_RANK" in os.environ:
            RANK = int(os.environ["HC_RANK"])


        def host(x, b):
            return x * b + RANK
    """)
    assert fingerprint.constants_read(_load(tmp_path, "hc_block_after_def", text).host) == ["global RANK (computed)"]
    augmented = ("import os\nfrom hc_consts import BLOCK\nBLOCK += len(os.sep)\n\n\n"
                 "def host(x, b):\n    return x * b + BLOCK\n")
    assert fingerprint.constants_read(_load(tmp_path, "hc_augmented", augmented, "BLOCK = 1\n").host) == [
        "global BLOCK (computed)"]


def test_a_literal_the_job_replaces_with_an_object_hashes_as_where_it_is_not_replaced(tmp_path):
    """``GROUP = None`` in the module, ``kernels.GROUP = dist.new_group(...)`` in the job's script:
    counted where it still held None (a campaign's actor), not where it held the group (the job),
    the two named other entries and the seeded cache never served the job."""
    text = "GROUP = None\n\n\ndef host(x, b):\n    return x * b if GROUP is None else x\n"
    actor = _load(tmp_path, "hc_group_actor", text)
    job = _load(tmp_path, "hc_group_job", text)
    job.GROUP = object()  # as the job's script sets it
    assert fingerprint.constants_read(job.host) == fingerprint.constants_read(actor.host) == ["global GROUP=None"]
    assert fingerprint.source_hash(job.host) == fingerprint.source_hash(actor.host)


def test_a_computed_constant_imported_from_a_package_hashes_alike_under_either_package_name(tmp_path, monkeypatch):
    """A campaign that imports the targets as src.pkg and a job that imports them as pkg: the
    imported constant was written with its module's full dotted name, so the two hashed apart
    (a tester of campaign seeding, 2026-12-05); modules are named by their last component."""
    pkg = tmp_path / "src" / "hcpkg"
    pkg.mkdir(parents=True)
    (tmp_path / "src" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "cfg.py").write_text("import os\nSHIFT = len(os.sep) + 1\n")
    (pkg / "ops.py").write_text("from .cfg import SHIFT\n\n\ndef host(x, b):\n    return x * b + SHIFT\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    hashes = []
    for name in ("src.hcpkg", "hcpkg"):
        ops = importlib.import_module(f"{name}.ops")
        assert fingerprint.constants_read(ops.host) == ["global SHIFT = cfg.SHIFT = len(os.sep) + 1"]
        hashes.append(fingerprint.source_hash(ops.host))
    for name in [m for m in sys.modules if m.split(".")[0] in ("src", "hcpkg")]:
        sys.modules.pop(name)
    assert hashes[0] == hashes[1]


def test_the_constants_are_found_once_per_function_for_the_hashes_and_the_entry(tmp_path, monkeypatch):
    """The hashes and the entry's ``reads`` ask at one first call: the module walk ran twice."""
    from triton_dist._store import constants
    from triton_dist._store.reads import reads_of

    walked: list[str] = []
    real = constants._made
    def made(name, text, namespace, depth):
        if depth == 0:  # (an imported name is followed into its module: depth 1)
            walked.append(name)
        return real(name, text, namespace, depth)

    monkeypatch.setattr(constants, "_made", made)
    host = _load(tmp_path, "hc_once").host
    fingerprint.source_hash(host)
    fingerprint.body_hash(host)
    assert reads_of(host) == fingerprint.constants_read(host)
    assert sorted(walked) == ["BLOCK", "IMPORTED", "RANK", "SHAPE"]  # each name walked once


REBOUND = {  # BLOCK = 128, then bound again at module level (each counted the literal before)
    "a_for_loop": "for BLOCK in (64,):\n    pass\n",
    "unpacking": "A, BLOCK = 1, 64\n",
    "a_chained_assignment": "A = BLOCK = 64\n",
    "an_assignment_expression": "(BLOCK := 64)\n",
    "an_import_as": "from hc_consts import IMPORTED as BLOCK\n",
}


@pytest.mark.parametrize("case", sorted(REBOUND))
def test_a_literal_bound_again_at_module_level_counts_by_name(tmp_path, case):
    """``for BLOCK in ...:`` after ``BLOCK = 128``: the name is bound more than once, its value
    is not what the literal says (counted by its name alone, as any name bound twice)."""
    text = f"BLOCK = 128\n{REBOUND[case]}\n\ndef host(x, b):\n    return x * b + BLOCK\n"
    assert fingerprint.constants_read(_load(tmp_path, f"hc_rebound_{case}", text).host) == ["global BLOCK (computed)"]


SOURCE_ONLY = textwrap.dedent('''
    import ctypes
    import logging
    import math
    import os
    from math import pi
    from torch.nn import functional as F

    import torch

    RANK = int(os.environ["HC_RANK"])
    logger = logging.getLogger(__name__)
    DEVICE = torch.device("cpu")
    LIB = ctypes.CDLL(None)
    _cache = {}
    BUF = torch.zeros(4) if RANK == 0 else None
    HOOK = (lambda x: x) if RANK == 1 else None
    if RANK == 0:
        LEADER = "rank 0"


    def helper(x):
        return x


    class Ops:
        pass


    def host(x, b):
        _cache[b] = logger.name, DEVICE, LIB, BUF, HOOK, helper, Ops, math, pi, F
        return x * b + (len(LEADER) if RANK == 0 else 0)
''')


def test_what_counts_is_decided_from_the_source_never_the_value_a_process_holds(tmp_path, monkeypatch):
    """A leader-only buffer (a tensor on rank 0, None on rank 1), a function on one rank: counted
    as the value held (a tensor not, None yes), two ranks hashed apart and refused to tune
    together (a tester, 2026-12-05). A computed global counts by its statement whatever it holds,
    a name only some ranks bind by its name; a def, class or import, a name imported from a
    module without Python source and a dict literal are not counted."""
    counted, hashes = [], []
    for rank in ("0", "1"):
        monkeypatch.setenv("HC_RANK", rank)
        module = _load(tmp_path, f"hc_source_only_{rank}", SOURCE_ONLY)
        assert (module.BUF is None, module.HOOK is None, hasattr(module, "LEADER")) == (rank == "1", rank == "0",
                                                                                          rank == "0")
        counted.append(fingerprint.constants_read(module.host))
        hashes.append((fingerprint.source_hash(module.host), fingerprint.body_hash(module.host)))
    assert counted[0] == counted[1] == [
        "global BUF = torch.zeros(4) if RANK == 0 else None", 'global DEVICE = torch.device("cpu")',
        "global HOOK = (lambda x: x) if RANK == 1 else None", "global LEADER (computed)",
        "global LIB = ctypes.CDLL(None)", 'global RANK = int(os.environ["HC_RANK"])',
        "global logger = logging.getLogger(__name__)"]
    assert hashes[0] == hashes[1]
