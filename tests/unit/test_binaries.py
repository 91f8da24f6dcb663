"""Shipping compiled winners (issue 23): bundle, install, check; the campaign's store and load.

The kernels are compiled into a real Triton file cache private to the test (the ``compiler``
fixture): by the stand-in compile step (tests/unit/compile_standin.py) under Triton's
interpreter, by Triton's real compiler on a GPU; Triton's own reader
(``FileCacheManager.get_group``) must find what an install wrote. Each test compiles a fresh
kernel object, so that no specialisation comes from Triton's in-memory cache of an earlier test
(whose files are in that test's cache directory).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import torch
import triton
import triton.language as tl

from tests.unit.compile_standin import compiler  # noqa: F401 - the fixture
from tests.unit.helpers import kernel_device
from triton_dist._measure.compile import capture_kernels
from triton_dist._store import binaries
from triton_dist.tune import autotune


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def fresh_add() -> Any:
    """``add(x, y, BLOCK)`` on a new kernel object (empty in-memory cache: see the docstring)."""
    kernel = triton.jit(add_kernel.fn)

    def add(x: torch.Tensor, y: torch.Tensor, BLOCK: int, out: torch.Tensor | None = None) -> torch.Tensor:
        out = torch.empty_like(x) if out is None else out
        kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK)
        return out

    return add


def _compiled_bundle(compiler: Any) -> tuple[dict[str, Any], Path]:  # noqa: F811
    x = torch.randn(300, device=kernel_device())
    out = torch.zeros_like(x)
    add = fresh_add()
    kernels = capture_kernels(lambda: add(x, x, BLOCK=128, out=out))
    assert [k.name for k in kernels] == ["add_kernel"]
    assert not out.any()  # a capture compiles, launches nothing
    if compiler is not None:  # the stand-in also says what it did
        assert [e.kind for e in compiler.events] == ["warmup"] and not compiler.launches
    # the kernel alone: host modules (which a real driver builds into the cache at its first use in
    # a process) are test_host_modules_travel_with_the_kernels' subject
    return json.loads(json.dumps(binaries.bundle(kernels, host_modules=False))), binaries.triton_cache_dir()


def _group(cache: Path, payload: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, str] | None:
    """What Triton's own cache reader finds for the bundle's kernel under ``cache``."""
    from triton.runtime.cache import FileCacheManager

    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    (digest,) = payload["kernels"]
    manager = FileCacheManager.__new__(FileCacheManager)  # the reader, for an existing directory
    manager.key, manager.cache_dir, manager.lock_path = digest, str(cache / digest), None
    return manager.get_group("add_kernel.json")


def test_install_writes_what_triton_reads_and_check_confirms_it(compiler, tmp_path, monkeypatch) -> None:  # noqa: F811
    payload, source = _compiled_bundle(compiler)
    node = tmp_path / "node-triton-cache"
    summary = binaries.install(payload, "add", "e" * 32, cache_dir=node)
    assert summary == {"installed": 1, "unchanged": 0, "skipped": "", "errors": []}

    group = _group(node, payload, monkeypatch)
    (digest,) = payload["kernels"]
    # the group names every file of the kernel's directory (a real compile adds its IRs)
    assert group is not None and {"add_kernel.cubin", "add_kernel.json"} <= set(group)
    assert set(group) == {name for name in payload["kernels"][digest] if not name.startswith("__grp__")}
    for name, path in group.items():  # absolute paths rewritten for this node, bytes identical
        assert Path(path).parent == node / digest
        assert Path(path).read_bytes() == (source / digest / name).read_bytes()
    assert binaries.check("add", "e" * 32, cache_dir=node) is None
    assert not list(node.rglob("*.tmp"))

    again = binaries.install(payload, "add", "e" * 32, cache_dir=node)
    assert again["unchanged"] == 1 and again["installed"] == 0


def test_a_corrupted_bundle_installs_nothing_of_that_kernel(compiler, tmp_path) -> None:  # noqa: F811
    payload, _ = _compiled_bundle(compiler)
    files = next(iter(payload["kernels"].values()))
    files["add_kernel.cubin"]["data"] = base64.b64encode(b"not the binary").decode()
    node = tmp_path / "node"
    summary = binaries.install(payload, "add", "e" * 32, cache_dir=node)
    assert summary["installed"] == 0 and "checksum mismatch" in summary["errors"][0]
    assert not [p for p in node.rglob("*") if p.is_file()]  # no file, no manifest
    assert "no shipped binaries" in binaries.check("add", "e" * 32, cache_dir=node)


def test_a_node_whose_triton_would_recompile_installs_nothing(compiler, tmp_path) -> None:  # noqa: F811
    payload, _ = _compiled_bundle(compiler)
    payload["fingerprint"]["triton_key"] = "0" * 20
    summary = binaries.install(payload, "add", "e" * 32, cache_dir=tmp_path / "node")
    assert summary["installed"] == 0 and summary["errors"] == []
    assert summary["skipped"].startswith("this node's Triton would recompile: triton_key: 000")
    assert not (tmp_path / "node").exists()


def test_refuses_names_that_leave_the_cache(compiler, tmp_path) -> None:  # noqa: F811
    payload, _ = _compiled_bundle(compiler)
    (digest, files), = payload["kernels"].items()
    payload["kernels"] = {digest: {"../../evil": files["add_kernel.cubin"]}}
    summary = binaries.install(payload, "add", "e" * 32, cache_dir=tmp_path / "node")
    assert "refusing the file name" in summary["errors"][0]
    assert not (tmp_path / "evil").exists()
    payload["kernels"] = {"..": files}
    summary = binaries.install(payload, "add", "f" * 32, cache_dir=tmp_path / "n2")
    assert "refusing the kernel directory" in summary["errors"][0]


def test_check_reports_why_a_fresh_process_would_compile(compiler, tmp_path) -> None:  # noqa: F811
    payload, _ = _compiled_bundle(compiler)
    node = tmp_path / "node"
    binaries.install(payload, "add", "e" * 32, cache_dir=node)
    (digest,) = payload["kernels"]
    binary = node / digest / "add_kernel.cubin"
    binary.write_bytes(b"changed")
    assert "was changed since it was installed" in binaries.check("add", "e" * 32, cache_dir=node)
    binary.unlink()
    assert "is missing" in binaries.check("add", "e" * 32, cache_dir=node)
    manifest = binaries.manifest_path("add", "e" * 32, node)
    data = json.loads(manifest.read_text())
    data["fingerprint"]["triton"] = "0.0.1"
    manifest.write_text(json.dumps(data))
    assert "would recompile: triton: 0.0.1 (shipped)" in binaries.check("add", "e" * 32, cache_dir=node)


def test_the_campaign_keeps_bundles_next_to_entries_and_installs_them(compiler, tmp_path, monkeypatch) -> None:  # noqa: F811
    """ray_runner.binaries without Ray: a rank collects, the driver stores (verify stays clean),
    seeding loads and a node installs into its Triton cache."""
    from ray_runner import binaries as shipping
    from triton_dist._store import verify

    tuned = autotune([{"BLOCK": b} for b in (32, 64)], lambda x, y: (x.numel(),), n_warmup=0, n_repeat=1)(fresh_add())
    x = torch.randn(200, device=kernel_device())
    entry = tuned.tune(x, x, write_cache=False)
    collected = shipping.collect(tuned, (x, x), {}, entry)
    assert set(collected) == {"bundle"}, collected
    root = tmp_path / "driver-root"
    from triton_dist._store import files

    files.write_entry(root, entry)
    assert shipping.store(root, entry, [{"binaries": collected}, {"binaries": {"error": "x"}}]) is None
    assert [f.kind for f in verify.verify(root) if f.problem] == []
    bundles = shipping.load(root, [entry])
    assert list(bundles) == [entry["id"]]
    node_cache = tmp_path / "node-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(node_cache))
    summary = shipping.install_here([entry], bundles)
    # the kernel, and the driver's host modules where a real compiler built them here (a GPU)
    shipped = len(bundles[entry["id"]]["kernels"])
    assert shipped == 1 if compiler is not None else shipped >= 1
    assert summary["installed"] == shipped and summary["errors"] == [] and summary["dir"] == str(node_cache)
    assert binaries.check(entry["function"], entry["id"]) is None
    # a bundle for another best config is not shipped with this entry
    other = dict(entry, best=dict(entry["best"], index=1 - entry["best"]["index"]))
    assert shipping.load(root, [other]) == {}


def test_preflight_lists_hits_whose_first_call_compiles() -> None:
    pytest.importorskip("pydantic", reason="ray_runner.preflight reads campaign specs with pydantic "
                                           "(requirements/dev.txt), absent from this environment")
    from ray_runner.preflight import summarize

    rows = [{"function": "m:f", "case": {"n": 1}, "world_size": 1, "rank": 0, "hit": True,
             "compiles": "no shipped binaries (...): the first call compiles"},
            {"function": "m:f", "case": {"n": 2}, "world_size": 1, "rank": 0, "hit": True, "compiles": None}]
    ok, lines = summarize([{"host": "h", "device": "cuda:0", "root": "/r", "rows": rows}])
    assert ok  # a hit stays a hit; compiling is reported, not a failure
    assert [line for line in lines if "COMPILES" in line] == [
        '  COMPILES m:f {"n": 1} rank 0/1: no shipped binaries (...): the first call compiles']


def test_host_modules_travel_with_the_kernels(compiler, tmp_path) -> None:  # noqa: F811
    """The driver's host modules (launchers, utilities: one ``*.so`` each, built with the C
    compiler at a fresh process's first launch) are shipped and installed with the kernels."""
    import hashlib
    import sysconfig

    from triton.runtime.cache import get_cache_manager

    name = "__triton_launcher" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")
    manager = get_cache_manager(hashlib.sha256(b"launcher source").hexdigest())
    manager.put(b"\x7fELF stand-in launcher", name)
    x = torch.randn(300, device=kernel_device())
    add = fresh_add()
    payload = json.loads(json.dumps(binaries.bundle(capture_kernels(lambda: add(x, x, BLOCK=64)))))
    assert Path(manager.cache_dir).name in payload["kernels"]
    # the kernel and the launcher above (and a real driver's own modules, built here on a GPU)
    assert len(payload["kernels"]) == 2 if compiler is not None else len(payload["kernels"]) >= 2
    node = tmp_path / "node"
    assert binaries.install(payload, "add", "e" * 32, cache_dir=node)["installed"] == len(payload["kernels"])
    assert (node / Path(manager.cache_dir).name / name).read_bytes() == b"\x7fELF stand-in launcher"
    assert binaries.check("add", "e" * 32, cache_dir=node) is None
    (node / Path(manager.cache_dir).name / name).unlink()
    assert "is missing" in binaries.check("add", "e" * 32, cache_dir=node)
    assert len(binaries.bundle([], host_modules=True)["kernels"]) == 0  # nothing without a kernel


def test_a_short_write_of_a_kernel_file_never_takes_the_name(tmp_path, monkeypatch) -> None:
    """Installed files are read back before they replace anything: a write that lost its tail
    (a full disk, a flaky network file system; simulated by a file object that drops the last
    byte) raises, leaves the file that was there and no temporary file."""
    from triton_dist._store import files

    target = tmp_path / "kernel.cubin"
    target.write_bytes(b"old binary")
    files.atomic_write_bytes(target, b"new binary", verify=True)
    assert target.read_bytes() == b"new binary"

    real_fdopen = files.os.fdopen

    class Short:
        def __init__(self, f: Any) -> None:
            self.f = f

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *exc: Any) -> None:
            self.f.close()

        def write(self, data: bytes) -> int:
            return self.f.write(data[:-1])

        def __getattr__(self, name: str) -> Any:
            return getattr(self.f, name)

    monkeypatch.setattr(files.os, "fdopen", lambda fd, mode: Short(real_fdopen(fd, mode)))
    with pytest.raises(OSError, match="does not read back"):
        files.atomic_write_bytes(target, b"newer binary", verify=True)
    assert target.read_bytes() == b"new binary"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kernel.cubin"]
    files.atomic_write_bytes(target, b"unverified", verify=False)  # what the caller asked for
    assert target.read_bytes() == b"unverifie"
