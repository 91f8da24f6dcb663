"""Issue 17: hostile cache entries and archives against the tuner and the cache command line.

Items 5, 7, 9, 10, 11 and 17: one check of an entry's values (``triton_dist._store.check``)
decides for the reader, ``verify``, ``prune --invalid``, ``import``, ``ls`` and ``show``; file-system
errors are one line and exit 1; ``--json`` is strict JSON.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path

import pytest

from triton_dist import cli
from triton_dist.errors import TritonDistWarning
from triton_dist.tune import autotune

REPO = Path(__file__).resolve().parents[2]
SPACE = [{"block": 1}, {"block": 2}, {"block": 4}]


def strict_json(text: str):
    """What a strict parser accepts (no NaN, no Infinity)."""
    def refuse(name: str):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def make_tuned(space=SPACE):
    calls: Counter[int] = Counter()

    @autotune(space, lambda n: ("n", n), n_warmup=1, n_repeat=2)
    def tools_fn(n, block):
        calls[block] += 1
        return n * 10 + block

    return tools_fn, calls


@pytest.fixture
def valid(cache_dir):
    """A valid entry written by a real tuning: (path, text)."""
    fn, _ = make_tuned()
    fn(3)
    (path,) = (cache_dir / "tools_fn").glob("*.json")
    return path, path.read_text()


def _nested_list(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


def _set(text: str, dotted: str, raw_json: str) -> str:
    """The entry with the field at ``dotted`` replaced by ``raw_json`` (written as text: some of
    these values cannot come from json.dumps)."""
    data = json.loads(text)
    marker = "__HOSTILE_VALUE__"
    node = data
    *parents, last = dotted.split(".")
    for name in parents:
        node = node[int(name)] if isinstance(node, list) else node[name]
    if isinstance(node, list):
        node[int(last)] = marker
    else:
        node[last] = marker
    return json.dumps(data).replace(json.dumps(marker), raw_json)


#: schema-valid entries with impossible values (the issue's cases and their relatives)
HOSTILE = {
    "time-10^400": ("candidates.1.time_ms", "1" + "0" * 400),
    "time-1e400": ("candidates.1.time_ms", "1e400"),
    "time-negative": ("candidates.1.time_ms", "-3.5"),
    "sem-nan": ("candidates.0.sem_ms", "NaN"),
    "best-time-infinity": ("best.time_ms", "Infinity"),
    "best-index-out-of-range": ("best.index", "99"),
    "candidate-index-bool": ("candidates.0.index", "true"),
    "default-time-string": ("default_time_ms", '"fast"'),
    "reused-a-list": ("reused", "[1, 2]"),
    "reused-scale-a-string": ("reused", '{"from": "x", "scale": "2x", "indices": [0]}'),
    "config-nested-950": ("candidates.2.config", '{"block": ' + _nested_list(950) + "}"),
    "error-an-object": ("candidates.0.error", '{"a": 1}'),
}


@pytest.fixture(params=sorted(HOSTILE))
def hostile(request, valid):
    path, text = valid
    dotted, raw = HOSTILE[request.param]
    path.write_text(_set(text, dotted, raw))
    return path


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_the_tuner_treats_an_impossible_entry_as_a_miss_with_a_warning(hostile, cache_dir):
    fn, calls = make_tuned()
    with pytest.warns(TritonDistWarning, match="ignoring cache file"):
        assert fn(3) in (31, 32, 34)
    assert sum(calls.values()) == 3 * len(SPACE) + 1  # re-tuned, and the new entry is whole
    grown, grown_calls = make_tuned(SPACE + [{"block": 8}])  # a grown space scans for reuse
    assert grown(3) in (31, 32, 34, 38)


def test_verify_reports_prune_removes_ls_and_show_stay_calm(hostile, cache_dir, capsys):
    status, out, err = run_cli(capsys, "verify", "--dir", str(cache_dir))
    assert status == 1 and "invalid" in out and hostile.name in out
    status, out, err = run_cli(capsys, "verify", "--json", "--dir", str(cache_dir))
    problems = strict_json(out)["problems"]
    # "corrupt" where the JSON parser itself gives up on the nesting (a deep test stack)
    assert status == 1 and [p["kind"] for p in problems] in (["invalid"], ["corrupt"])

    status, out, err = run_cli(capsys, "ls", "--dir", str(cache_dir))
    assert status == 0 and "1 unusable file" in err and "unusable" not in out  # a note: stderr
    status, out, err = run_cli(capsys, "ls", "--json", "--dir", str(cache_dir))
    listing = strict_json(out)
    assert listing["entries"] == [] and listing["unusable"][0]["path"] == str(hostile)

    status, out, err = run_cli(capsys, "show", "--dir", str(cache_dir), str(hostile))
    assert status == 1 and err.startswith("error: ") and "not a usable entry" in err
    status, out, err = run_cli(capsys, "show", "--json", "--dir", str(cache_dir), str(hostile))
    assert status == 1 and strict_json(out)["error"] == "CacheAdminError"

    status, out, err = run_cli(capsys, "prune", "--invalid", "--dir", str(cache_dir))
    assert status == 0 and not hostile.exists()


# ---------------------------------------------------------------------------- import

def _archive_with(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_import_refuses_an_archive_with_an_impossible_entry_before_writing_anything(hostile, valid, tmp_path, capsys):
    _, good_text = valid
    # a second valid entry (another key) comes first in the archive, the hostile one after it
    other_root = tmp_path / "other"
    os.environ["TRITON_DIST_AUTOTUNE_DIR"] = str(other_root)
    try:
        fn, _ = make_tuned()
        fn(5)
    finally:
        os.environ["TRITON_DIST_AUTOTUNE_DIR"] = str(hostile.parent.parent)
    (good,) = (other_root / "tools_fn").glob("*.json")
    archive = _archive_with(tmp_path / "mixed.tar.gz", {
        "MANIFEST.json": json.dumps({"format": "triton_dist.cache-archive/v1"}).encode(),
        f"tools_fn/{good.name}": good.read_bytes(),
        f"tools_fn/{hostile.name}": hostile.read_bytes(),
    })
    target = tmp_path / "target"
    for extra in (["--dry-run"], []):
        status, out, err = run_cli(capsys, "import", "--dir", str(target), str(archive), *extra)
        assert status == 1, (extra, out, err)
        assert "nothing was imported" in err and hostile.name in err
        assert not target.exists()  # all or nothing: not even the valid member


def test_import_of_a_nan_member_refuses_the_whole_archive_also_in_dry_run(valid, tmp_path, capsys):
    path, text = valid
    nan_entry = text.replace('"sem_ms": 0.0', '"sem_ms": NaN', 1)
    if nan_entry == text:  # sem of a real tuning is rarely exactly 0: put NaN on a time instead
        nan_entry = _set(text, "candidates.0.sem_ms", "NaN")
    archive = _archive_with(tmp_path / "nan.tar.gz", {
        "MANIFEST.json": json.dumps({"format": "triton_dist.cache-archive/v1"}).encode(),
        f"tools_fn/{path.name}": nan_entry.encode(),
    })
    for extra in (["--dry-run"], [], ["--json"]):
        target = tmp_path / f"t{len(extra)}"
        status, out, err = run_cli(capsys, "import", "--dir", str(target), str(archive), *extra)
        assert status == 1 and "Traceback" not in err and not target.exists()
        if "--json" in extra:
            assert strict_json(out)["error"] == "CacheAdminError"


# ---------------------------------------------------------------------------- 5: sizes

@pytest.mark.timeout(60)
def test_verify_checks_sizes_before_reading(valid, cache_dir, capsys):
    path, _ = valid
    huge = path.with_name("0" * 32 + ".json")
    with huge.open("wb") as f:  # 30 GB, sparse: before, verify read it whole (MemoryError)
        f.truncate(30 * 2**30)
    status, out, err = run_cli(capsys, "verify", "--json", "--dir", str(cache_dir))
    problems = strict_json(out)["problems"]
    assert status == 1
    assert [(p["path"], p["kind"]) for p in problems] == [(str(huge), "invalid")]
    assert "larger than" in problems[0]["detail"]


# ---------------------------------------------------------------------------- 11: permissions

def _in_private_mounts(shell: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    if not shutil.which("unshare") or subprocess.run(["unshare", "-rm", "true"]).returncode != 0:
        pytest.skip("needs unshare -rm: a read-only bind mount (root ignores permission bits)")
    return subprocess.run(["unshare", "-rm", "sh", "-c", shell], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env, "PYTHONPATH": str(REPO)}, cwd=REPO)


def _cache_cmd(*argv: str) -> str:
    return " ".join([sys.executable, "-m", "triton_dist.cache", *argv])


def test_import_into_a_read_only_root_and_export_into_a_read_only_directory_fail_in_one_line(
        valid, cache_dir, tmp_path):
    archive = tmp_path / "all.tar.gz"
    assert cli.main(["export", "--dir", str(cache_dir), str(archive)]) == 0
    ro_root, ro_dir = tmp_path / "ro-root", tmp_path / "ro-dir"
    ro_root.mkdir()
    ro_dir.mkdir()
    for shell, where in (
        (_cache_cmd("import", "--dir", str(ro_root), str(archive)), ro_root),
        (_cache_cmd("export", "--dir", str(cache_dir), str(ro_dir / "out.tar.gz")), ro_dir),
    ):
        done = _in_private_mounts(f"mount --bind {where} {where} && mount -o remount,bind,ro {where} && "
                                  f"exec {shell}", {})
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr
        lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        assert len(lines) == 1 and "Read-only file system" in lines[0], done.stderr
        assert not any(where.iterdir())


def test_import_refuses_a_function_directory_linked_out_of_the_root(valid, cache_dir, tmp_path, capsys):
    archive = tmp_path / "all.tar.gz"
    assert cli.main(["export", "--dir", str(cache_dir), str(archive)]) == 0
    target, outside = tmp_path / "target", tmp_path / "outside"
    target.mkdir()
    outside.mkdir()
    (target / "tools_fn").symlink_to(outside)
    status, out, err = run_cli(capsys, "import", "--dir", str(target), str(archive))
    assert status == 1 and err.startswith("error: ") and "outside the cache root" in err
    assert not any(outside.iterdir())  # nothing written through the link


# ---------------------------------------------------------------------------- 17: JSON

def test_every_json_document_is_strict_json(valid, cache_dir, tmp_path, capsys):
    from triton_dist._cli.commands import emit

    emit({"time": float("nan"), "rows": [float("inf"), 1.5, {"x": -float("inf")}]})
    assert strict_json(capsys.readouterr().out) == {"time": None, "rows": [None, 1.5, {"x": None}]}
    path, _ = valid
    for argv in (["ls"], ["show", str(path)], ["verify"], ["why", "--no-import", "tools_fn", "('n', 3)"],
                 ["prune", "--invalid", "--dry-run"], ["export", str(tmp_path / "a.tar.gz")]):
        status, out, err = run_cli(capsys, argv[0], "--json", "--dir", str(cache_dir), *argv[1:])
        assert isinstance(strict_json(out), dict), argv


def test_an_entry_that_cannot_be_created_names_its_folder_not_dot(tmp_path):
    folder = tmp_path / "root" / "host"
    folder.mkdir(parents=True)
    script = ("from triton_dist._store.create import create_entry_text\n"
              "try:\n"
              f"    create_entry_text({str(folder / 'e.json')!r}, b'{{}}')\n"
              "except OSError as exc:\n"
              "    print('FILENAME', exc.filename, type(exc).__name__)\n")
    done = _in_private_mounts(f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder} && "
                              f"exec {sys.executable} -c \"$SCRIPT\"", {"SCRIPT": script})
    # before: "[Errno 30] Read-only file system: '.'" (the unnamed file is opened as "." of the folder)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["FILENAME", str(folder), "OSError"], done.stdout
