"""A process that exits right after a tuning, or while a thread is tuning (a job that runs for days
ends, is restarted from a checkpoint, or stops a data loader thread): what is on disk, whether its
fsync was done, and that exit does not hang. Real processes, real Triton kernels under the
interpreter; a slow disk is an fsync that sleeps first (``FSYNC_S``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.helpers import env_for

CHILD = textwrap.dedent('''
    import os, sys, threading, time
    synced = os.environ["SYNCED"]
    real_fsync = os.fsync

    def slow_fsync(fd):  # a busy disk: each fsync takes FSYNC_S, then says which file it synced
        time.sleep(float(os.environ.get("FSYNC_S", "0")))
        real_fsync(fd)
        with open(synced, "a") as f:
            f.write(os.readlink(f"/proc/self/fd/{fd}") + "\\n")

    os.fsync = slow_fsync
    import torch, triton, triton.language as tl
    from triton_dist.tune import autotune
    from triton_dist._store import background_sync

    if "EXIT_WAIT_S" in os.environ:
        background_sync.EXIT_WAIT_S = float(os.environ["EXIT_WAIT_S"])

    @triton.jit
    def scale_kernel(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha, mask=mask)

    LAUNCH = threading.Lock()  # Triton's interpreter is not thread-safe
    SLOW_RUN_S = float(os.environ.get("SLOW_RUN_S", "0"))

    @autotune(config_space=[{"BLOCK": 16}, {"BLOCK": 32}], key_fn=lambda x, *a, **k: (x.shape[0],),
              n_warmup=1, n_repeat=2)
    def scale(x, alpha, BLOCK):
        time.sleep(SLOW_RUN_S)
        y = torch.empty_like(x)
        with LAUNCH:
            scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), alpha, BLOCK=BLOCK)
        return y

    how = sys.argv[1]
    x = torch.randn(40)
    if how == "atexit-tunes":  # registered before the first tuning: runs after the tuner's exit wait
        import atexit
        atexit.register(lambda: print("tuned at exit", scale(torch.randn(24), 2.0).shape, flush=True))
    if how == "daemon-mid-tuning":  # the main thread ends while a daemon thread tunes
        threading.Thread(target=scale, args=(x, 2.0), daemon=True).start()
        time.sleep(1.0)
        print("exiting mid-tuning", flush=True)
        sys.exit(0)
    if how == "thread-sys.exit":  # a worker thread tunes and calls sys.exit (which ends that thread)
        def work():
            scale(x, 2.0)
            sys.exit(7)
        t = threading.Thread(target=work)
        t.start()
        t.join()
    else:
        scale(x, 2.0)
    print("tuned", flush=True)
    if how == "sys.exit":
        sys.exit(3)
    if how == "os._exit":
        os._exit(4)
''')


def _run(tmp_path: Path, how: str, **extra: str) -> tuple[subprocess.CompletedProcess, Path, list[str]]:
    root, synced = tmp_path / "cache", tmp_path / "synced.txt"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    out = subprocess.run([sys.executable, str(script), how], env=env_for(root, SYNCED=str(synced), **extra),
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    lines = synced.read_text().splitlines() if synced.exists() else []
    return out, root, lines


def _entries(root: Path) -> list[Path]:
    return sorted((root / "scale").glob("*.json"))


@pytest.mark.parametrize(("how", "code"), [("normal", 0), ("sys.exit", 3), ("thread-sys.exit", 0)])
def test_an_exit_right_after_a_tuning_waits_for_its_entrys_fsync(tmp_path: Path, how: str, code: int) -> None:
    out, root, synced = _run(tmp_path, how, FSYNC_S="0.5")
    assert out.returncode == code, out.stderr[-2000:]
    [entry] = _entries(root)
    assert json.loads(entry.read_text())["best"]["index"] in (0, 1)
    # before: the fsync thread (a daemon) was dropped at exit, its entry never synced
    assert str(entry.resolve()) in synced, (synced, out.stderr[-1000:])


def test_os_exit_right_after_a_tuning_leaves_a_complete_entry(tmp_path: Path) -> None:
    out, root, _ = _run(tmp_path, "os._exit", FSYNC_S="0.5")
    assert out.returncode == 4, out.stderr[-2000:]
    [entry] = _entries(root)  # not synced (os._exit skips every handler), but whole under its name
    assert json.loads(entry.read_text())["best"]["index"] in (0, 1)


def test_an_exit_while_a_daemon_thread_tunes_neither_hangs_nor_leaves_a_partial_entry(tmp_path: Path) -> None:
    out, root, _ = _run(tmp_path, "daemon-mid-tuning", SLOW_RUN_S="0.4")  # 6 runs: ~2.4 s of tuning
    assert out.returncode == 0, out.stderr[-2000:]
    assert "exiting mid-tuning" in out.stdout
    folder = root / "scale"
    [log] = folder.glob("*.log")  # the tuning had begun
    assert "tuning __main__.scale" in log.read_text() and "best config" not in log.read_text()
    leftovers = [p.name for p in folder.rglob("*") if p.is_file() and p.suffix != ".log" and p.parent.name != ".keys"]
    assert leftovers == []  # no entry, no temporary file: the tuning was cut before its write
    # the next process tunes the key as if nothing had happened
    out, root, _ = _run(tmp_path, "normal")
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(_entries(root)) == 1


def test_an_fsync_that_hangs_holds_the_exit_up_only_so_long_and_says_so(tmp_path: Path) -> None:
    out, root, synced = _run(tmp_path, "normal", FSYNC_S="30", EXIT_WAIT_S="1")  # subprocess.run's timeout: 120 s
    assert out.returncode == 0, out.stderr[-2000:]
    assert synced == [] and len(_entries(root)) == 1
    assert "exiting with 1 cache entries not yet synced to disk after 1s" in out.stderr


def test_a_tuning_in_an_atexit_handler_after_the_exit_wait_is_synced(tmp_path: Path) -> None:
    """atexit runs handlers last-registered first: a user's handler registered before the first
    tuning runs after the tuner's exit wait, and the entry it tuned was left to the daemon thread."""
    out, root, synced = _run(tmp_path, "atexit-tunes", FSYNC_S="0.5")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "tuned at exit" in out.stdout
    entries = _entries(root)
    assert len(entries) == 2
    assert all(str(e.resolve()) in synced for e in entries), (synced, out.stderr[-1000:])
