"""``torch.npu.NPUGraph`` (stand-in): capture records Triton launches, replay issues them again.

torch_npu's NPUGraph mirrors ``torch.cuda.CUDAGraph``: ``capture_begin(pool=None,
capture_error_mode="global")`` / ``capture_end()`` on a non-default stream, then ``replay()``;
nothing runs during a capture. Here the work of a graph is what Triton's interpreter would
launch: while a capture is open (on this thread), the interpreter's grid launches are recorded
instead of executed; ``replay`` executes them with the tensors they were captured with, as a
device graph reads and writes the captured addresses. Torch operations inside a capture run
when issued (the stand-in cannot defer them); capturing on the default stream raises as
torch_npu does.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_local = threading.local()
_patch_lock = threading.Lock()
_open = {"count": 0, "original": None}


def _executor_class() -> Any:
    from triton.runtime.interpreter import GridExecutor

    return GridExecutor


def _install_recorder() -> None:
    with _patch_lock:
        _open["count"] += 1
        if _open["count"] > 1:
            return
        cls = _executor_class()
        original = cls.__call__
        _open["original"] = original

        def call(executor: Any, *args: Any, **kwargs: Any) -> Any:
            capture = getattr(_local, "capture", None)
            if capture is None:
                return original(executor, *args, **kwargs)
            capture.append((executor, args, kwargs))
            return None

        cls.__call__ = call


def _remove_recorder() -> None:
    with _patch_lock:
        _open["count"] -= 1
        if _open["count"] == 0:
            _executor_class().__call__ = _open["original"]


def graph_pool_handle() -> tuple[int, int]:
    from . import calls

    calls["graph_pool_handle"] += 1
    return (0, id(object()))


class NPUGraph:
    def __init__(self) -> None:
        from . import calls

        calls["NPUGraph"] += 1
        self._launches: list[tuple[Any, tuple, dict]] | None = None
        self._capturing = False

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        from . import _default, calls, current_stream

        calls["NPUGraph.capture_begin"] += 1
        if capture_error_mode not in ("global", "thread_local", "relaxed"):
            raise RuntimeError(f"Unknown capture error mode. Expected `global`, `thread_local`, or `relaxed`, "
                               f"but got: {capture_error_mode}")
        if current_stream() is _default:
            raise RuntimeError("NPU graphs must be captured on a non-default stream. "
                               "(However, after capture, it's ok to replay them on the default stream.)")
        if getattr(_local, "capture", None) is not None:
            raise RuntimeError("a graph capture is already open on this thread")
        _install_recorder()
        self._capturing = True
        self._launches = []
        _local.capture = self._launches

    def capture_end(self) -> None:
        from . import calls

        calls["NPUGraph.capture_end"] += 1
        if not self._capturing:
            raise RuntimeError("capture_end() without capture_begin()")
        _local.capture = None
        self._capturing = False
        _remove_recorder()

    def replay(self) -> None:
        from . import calls

        calls["NPUGraph.replay"] += 1
        if self._launches is None or self._capturing:
            raise RuntimeError("replay() of a graph that was not captured")
        original = _open["original"] or _executor_class().__call__
        for executor, args, kwargs in self._launches:
            original(executor, *args, **kwargs)

    def reset(self) -> None:
        self._launches = None

    def pool(self) -> tuple[int, int]:
        return (0, id(self))


@contextlib.contextmanager
def graph(npu_graph: NPUGraph, pool: Any = None, stream: Any = None,
          capture_error_mode: str = "global") -> Iterator[NPUGraph]:
    """``torch.npu.graph(...)``: capture the block into ``npu_graph`` on a side stream."""
    from . import Stream, synchronize
    from . import stream as use_stream

    synchronize()
    with use_stream(stream or Stream()):
        npu_graph.capture_begin(pool=pool, capture_error_mode=capture_error_mode)
        try:
            yield npu_graph
        finally:
            npu_graph.capture_end()
