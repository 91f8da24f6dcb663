"""Ctrl-C on a rank that waits for another in the key agreement or the MAX reduction of the
timings (real gloo ranks). ``work.wait(timeout)`` blocked in C++: the KeyboardInterrupt came
only when the other rank arrived, or after TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S (300 s by
default; a tester, 2026-12). The wait polls now, and the interrupt comes at once."""

from __future__ import annotations

import pytest
from harness import run_ranks

pytestmark = pytest.mark.timeout(180)

#: how long the slow rank keeps the waiting one waiting
SLOW_S = 6.0


def interrupted_while_waiting(rank: int, world_size: int, where: str) -> dict:
    import os
    import signal
    import threading
    import time

    import torch
    import torch.distributed as dist

    from triton_dist import _distributed
    from triton_dist.tune import autotune

    sent: list[float] = []
    armed = [False]
    finish = _distributed._finish

    def finish_then_ctrl_c(work, timeout_s):  # rank 0 is inside the wait when the signal comes
        if armed[0]:
            armed[0] = False
            timer = threading.Timer(0.3, lambda: (sent.append(time.monotonic()),
                                                  os.kill(os.getpid(), signal.SIGINT)))
            timer.start()
        return finish(work, timeout_s)

    _distributed._finish = finish_then_ctrl_c

    def ctrl_c_soon() -> None:  # in the next wait for a collective (not before: a loaded machine)
        armed[0] = True

    benches = [0]

    def bench(fn, n_warmup, n_repeat):
        benches[0] += 1
        for _ in range(n_warmup + n_repeat):
            fn()
        if where == "reduction" and benches[0] == 2:  # the last config: the MAX reduction follows
            if rank == 1:
                time.sleep(SLOW_S)
            else:
                ctrl_c_soon()
        return [1.0] * n_repeat

    @autotune([{"B": 1}, {"B": 2}], lambda x, out: x.numel(), n_warmup=1, n_repeat=1, do_bench=bench)
    def host(x, out, B):
        out += x
        return out

    x, out = torch.ones(8), torch.zeros(8)
    if where == "agreement":
        if rank == 1:
            time.sleep(SLOW_S)
        else:
            ctrl_c_soon()
    start = time.monotonic()
    try:
        host(x, out, autotune_pg=dist.group.WORLD)
    except KeyboardInterrupt:
        return {"interrupted_after_s": time.monotonic() - sent[0], "waited_s": time.monotonic() - start,
                "out": out.tolist()}
    except Exception as exc:  # noqa: BLE001 - the other rank's side: its peer left
        return {"error": type(exc).__name__}
    return {"returned": out.tolist()}


@pytest.mark.parametrize("where", ["agreement", "reduction"])
def test_a_rank_waiting_for_another_is_interrupted_at_once(tmp_path, where):
    results = run_ranks(interrupted_while_waiting, 2, timeout_s=90, args=(where,), tmp=tmp_path,
                        env={"TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S": "60"},
                        rank_env={r: {"TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / f"cache{r}")} for r in range(2)})
    assert not any(r.get("hung") for r in results), results
    assert "ok" in results[0], results[0]
    waiting = results[0]["ok"]
    assert "interrupted_after_s" in waiting, waiting
    assert waiting["interrupted_after_s"] < 1.0, waiting  # before: when rank 1 arrived, SLOW_S later
    assert waiting["out"] == [0.0] * 8  # the arguments as passed
