"""A shared cache root across a triton_dist upgrade (an operator, 2026-12-05).

``old_entries/`` holds entries as triton_dist f392a35 (2026-12-05 03:34, before the kernel
dependencies, kernels-in-configs and functions-in-configs changes) and e1436ab (2026-12-04 01:52, before keys Python
holds equal were written alike) wrote them for :data:`MODULE` on a CPU under Triton's
interpreter: ``git worktree add /tmp/old f392a35``, then ``PYTHONPATH=/tmp/old:. python upgmod.py``
with ``TRITON_DIST_AUTOTUNE_DIR`` set. Only their hardware (and hence their id and file name) is
this machine's, as that version would write them here.

Every triton_dist records ``"triton_dist": "0.1.0"``, so the head could not tell such an entry
from its own: its miss of the unchanged ``scaled`` (whose source hash now counts the kernel's
helper and constant) was told as "the function's source changed since the entry was tuned", in
``cache why`` and in the strict cache-only error that a job started on a root seeded by the old
version raises. Entries now record the date of their rules (``rules``), and a miss on an entry
without it, or of other rules, says that an older triton_dist may have written it, what changed,
and the fix; nothing of the old version's is removed or served.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

from tests.cli.helpers import run_cli, run_python
from triton_dist._store import files as _cache
from triton_dist._store.rules import RULES

OLD = Path(__file__).parent / "old_entries"

MODULE = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl

    from triton_dist.tune import autotune

    SCALE: tl.constexpr = tl.constexpr(3)


    @triton.jit
    def times(v):
        return v * SCALE


    @triton.jit
    def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, times(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


    @triton.jit
    def double_a(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


    @triton.jit
    def double_b(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(y_ptr + offs, v + v, mask=offs < n)


    @autotune(config_space=[{"BLOCK": 32}, {"BLOCK": 64}], key_fn=lambda x: (x.numel(),), n_warmup=1, n_repeat=2)
    def scaled(x, *, BLOCK):
        y = torch.empty_like(x)
        scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK)
        return y


    @autotune(config_space=[{"K": double_a}, {"K": double_b}], key_fn=lambda x: (x.numel(),), n_warmup=1, n_repeat=2)
    def doubled(x, *, K):
        y = torch.empty_like(x)
        K[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
        return y


    @triton.jit
    def add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


    @autotune(config_space=[{"BLOCK": 32}, {"BLOCK": 64}], key_fn=lambda x, alpha: (x.numel(), alpha), n_warmup=1,
              n_repeat=2)
    def shifted(x, alpha, *, BLOCK):
        y = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK)
        return y * alpha


    def twice(y):
        return y * 2


    def thrice(y):
        return y * 3


    @autotune(config_space=[{"op": twice}, {"op": thrice}], key_fn=lambda x: (x.numel(),), n_warmup=1, n_repeat=2)
    def applied(x, *, op):
        y = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
        return op(y) - op(y) + y


    if __name__ == "__main__":
        x = torch.arange(64, dtype=torch.float32)
        assert torch.equal(scaled(x), x * 3) and torch.equal(doubled(x), x * 2)
        assert torch.equal(shifted(x, 2.0), (x + 1) * 2)
        assert torch.equal(applied(x), x + 1)
''').lstrip()

CALL = '''
    import torch, upgmod
    from triton_dist.errors import CacheMissError
    x = torch.arange(64, dtype=torch.float32)
    for fn in (upgmod.scaled, upgmod.doubled):
        try:
            fn(x)
        except CacheMissError as exc:
            print("MISS", str(exc).replace("\\n", " "))
'''


def _old_root(tmp_path: Path) -> tuple[Path, Path, dict[str, Path]]:
    """A project with MODULE and a cache root holding the old versions' entries, as they would
    have written them on this machine."""
    project, root = tmp_path / "project", tmp_path / "cache"
    project.mkdir()
    (project / "upgmod.py").write_text(MODULE)
    here = run_python("import json; from triton_dist._backends import get_backend; from triton_dist._store."
                      "fingerprint import hardware_info; print(json.dumps(hardware_info(get_backend())))",
                      root, project)  # as the processes below see it (TRITON_DIST_DEVICE=cpu)
    assert here.returncode == 0, here.stderr
    hardware = json.loads(here.stdout.splitlines()[-1])
    written = {}
    for name, version in (("scaled", "f392a35"), ("doubled", "f392a35"), ("shifted", "e1436ab"),
                          ("applied", "f392a35")):
        entry = json.loads((OLD / f"{version}-{name}.json").read_text())
        assert "rules" not in entry  # as the old version wrote it
        entry["hardware"] = hardware
        entry["id"] = _cache.entry_id(entry["source_hash"], hardware["digest"], entry["key"])
        path = root / name / f"{entry['id']}.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(entry, indent=2, sort_keys=True))
        written[name] = path
    return project, root, written


def test_a_miss_on_an_older_versions_entry_names_the_upgrade_not_only_an_edit(tmp_path: Path) -> None:
    project, root, old = _old_root(tmp_path)
    before = {name: path.read_bytes() for name, path in old.items()}

    # a job started in strict cache-only mode on the root the old version seeded
    strict = run_python(CALL, root, project, TRITON_DIST_AUTOTUNE_CACHE_ONLY="strict")
    assert strict.returncode == 0, strict.stderr
    misses = [line for line in strict.stdout.splitlines() if line.startswith("MISS")]
    assert len(misses) == 2, strict.stdout
    scaled, doubled = misses
    assert "upgmod.scaled" in scaled and "differs in source" in scaled
    for message in misses:  # the upgrade, what changed, and the fix, beside the component
        assert f"a triton_dist older than {RULES} may have written it" in message, message
        assert "the function may be unchanged" in message and "seed the cache with a campaign" in message
    assert "a Triton kernel in a config is written by its" in doubled  # the change that explains it

    # `cache why` of each: still a miss (exit 1), with the same words
    for name, key in (("scaled", "(64,)"), ("doubled", "(64,)")):
        why = run_cli("why", f"upgmod:{name}", key, root=root, modules=project)
        assert why.returncode == 1, why.stdout + why.stderr
        assert "MISS" in why.stdout and f"a triton_dist older than {RULES} may have written it" in why.stdout

    # `show` says which rules an entry was written under (every version says triton_dist=0.1.0)
    shown = run_cli("show", str(old["scaled"]), root=root, modules=project)
    assert shown.returncode == 0, shown.stderr
    assert f"rules     none recorded (this triton_dist's are of {RULES}: an older version wrote it" in shown.stdout

    # nothing served, nothing of the old version's removed or changed by looking
    assert {name: path.read_bytes() for name, path in old.items()} == before

    # a tuning job: tunes both, its entries record this version's rules, the old files are kept
    tuned = run_python("import runpy; runpy.run_module('upgmod', run_name='__main__')", root, project)
    assert tuned.returncode == 0, tuned.stderr
    new = [p for p in root.glob("*/*.json") if json.loads(p.read_text()).get("rules") == RULES]
    assert sorted(p.parent.name for p in new) == ["applied", "doubled", "scaled", "shifted"]
    shown = run_cli("show", str(new[0]), root=root, modules=project)
    assert f"rules     {RULES} (this triton_dist's)" in shown.stdout, shown.stdout + shown.stderr
    for name in ("scaled", "shifted"):  # another id: left where it was
        assert old[name].read_bytes() == before[name]
    # the same id (a kernel that uses nothing): the old entry is replaced and kept in history
    history = list((root / "doubled" / "history").glob("*.json"))
    assert [p.read_bytes() for p in history] == [before["doubled"]]


def test_a_key_an_older_version_wrote_otherwise_is_named_with_the_text_this_one_writes(tmp_path: Path) -> None:
    """e1436ab (2026-12-04 01:52) wrote ``alpha=2.0`` as ``(64, 2.0)``, this version as ``(64, 2)``:
    ``why upgmod:shifted "(64, 2.0)"`` said "the entry is for key (64, 2.0)", the key asked for."""
    project, root, old = _old_root(tmp_path)
    why = run_cli("why", "upgmod:shifted", "(64, 2.0)", root=root, modules=project)
    assert why.returncode == 1, why.stdout + why.stderr
    reason = next(line for line in why.stdout.splitlines() if line.startswith("reason"))
    assert str(old["shifted"]) in reason and "differs in key, source" in reason, reason
    assert "the entry is for key (64, 2.0), which this triton_dist writes as (64, 2): the entry records no rules " \
           "date" in reason and "2.0 as 2" in reason
    assert reason.count("the entry records no rules date") == 1 and "(see above)" in reason  # said once


def test_a_tuning_over_an_older_versions_config_names_the_upgrade(tmp_path: Path) -> None:
    """f392a35 wrote a Python function in a config by its name; this version adds a digest of its
    source, so the old entry (at the id this version looks for) no longer matches: the tuner's
    warning said "the cached best config is no longer in config_space", as after an edit."""
    project, root, old = _old_root(tmp_path)
    tuned = run_python("import runpy, warnings; warnings.simplefilter('always'); "
                       "runpy.run_module('upgmod', run_name='__main__')", root, project)
    assert tuned.returncode == 0, tuned.stderr
    said = [line for line in tuned.stderr.splitlines() if "ignoring cache file" in line]
    assert len(said) == 1 and str(old["applied"]) in said[0], tuned.stderr
    assert "the cached best config is no longer in config_space (or this triton_dist writes it otherwise: the " \
           f"entry records no rules date, so a triton_dist older than {RULES} may have written it" in said[0]
    assert "a Python function in a config" in said[0] and "seed the cache with a campaign" in said[0]


def test_an_entry_of_this_versions_rules_is_told_as_an_edit_alone(tmp_path: Path) -> None:
    """The words above are for entries of other rules only: after an edit of the function, an
    entry this version wrote is a source miss without them."""
    project, root, _ = _old_root(tmp_path)
    shutil.rmtree(root)
    tuned = run_python("import runpy; runpy.run_module('upgmod', run_name='__main__')", root, project)
    assert tuned.returncode == 0, tuned.stderr
    (project / "upgmod.py").write_text(MODULE.replace("v * SCALE", "v * SCALE + 0"))
    why = run_cli("why", "upgmod:scaled", "(64,)", root=root, modules=project)
    assert why.returncode == 1 and "differs in source" in why.stdout, why.stdout + why.stderr
    assert "triton_dist older than" not in why.stdout and "may be unchanged" not in why.stdout
