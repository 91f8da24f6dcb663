"""Tuned calls from ``torch.compile``d code: TorchDynamo never traces a tuner.

A tuned function (``autotune``'s face) and a ``contextual_autotune``'d call pick their configs at
run time (``key_fn`` and a dict lookup; a miss runs the host function again and again, reads and
writes files, may wait for other ranks): nothing a graph can hold. Traced, a miss was compiled
frame by frame (the tuner's frames, the host function's up to Dynamo's recompile limit, the
candidates timed through compiled frames) and a hit was inlined, the host function traced into
the caller's graph. :func:`opaque` marks such a function:

- ``_torchdynamo_disable`` and its message, plain attributes of the function (as
  ``torch.compiler.disable`` sets on its wrapper): Dynamo does not inline a call of it but breaks
  the graph there, and with ``fullgraph=True`` raises ``Unsupported`` with the message, which
  names the fix (the call as a custom op);
- its code skipped by Dynamo together with everything it calls (a frame strategy ``SKIP`` for
  the frame and recursively, set once on the code object): run after the graph break, the call
  is plain eager Python. Dynamo consults it only while its frame hook is installed, in compiled
  code: a call anywhere else runs exactly as before (no wrapper, the hit path unchanged).

Tensors that hold no data (what ``torch.export`` without strict mode traces with) reach a
tuner's call anyway: :mod:`triton_dist._dataless`.

Nothing is imported from ``torch._dynamo``: the strategy is ``torch._C._dynamo.eval_frame``'s
(part of ``torch._C``, private; torch 2.13 here). A torch without it gets the graph break only:
Dynamo may then compile frames inside the call (the README says to wrap it in
``torch.compiler.disable`` there).
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from typing import Any

__all__ = ["contextual_message", "opaque", "skip_everything_in", "tuned_message"]

_lock = threading.Lock()
_skipped: set[types.CodeType] = set()  # code objects already marked (a face's code is shared by all faces)

_CUSTOM_OP = ("For one graph (fullgraph=True), call it through a custom op: "
              "torch.library.custom_op(\"mylib::name\", mutates_args=(...)) around a function that "
              "makes the call, with register_fake giving its output's shape (README, \"From "
              "torch.compile'd code\"); or compile without fullgraph=True.")


def tuned_message(qualname: str) -> str:
    return (f"{qualname} is tuned by triton_dist.tune.autotune, which picks its config with key_fn "
            "when called and tunes on a miss: torch.compile runs such a call outside the graph (a "
            "graph break; triton_dist marks it so, there is no torch.compiler.disable of yours to "
            f"remove). {_CUSTOM_OP}")


def contextual_message() -> str:
    return ("a contextual_autotune'd function (triton_dist.autotuner) re-runs its function to tune "
            "the inner @triton.autotune kernels when called: torch.compile runs such a call outside "
            "the graph (a graph break; triton_dist marks it so, there is no torch.compiler.disable "
            f"of yours to remove). {_CUSTOM_OP}")


def opaque(fn: Callable[..., Any], message: str) -> None:
    """Mark ``fn`` (a Python function) as never traced by Dynamo (the module docstring). A chain
    to a ``torch.compiler.disable``'d host function that ``functools.wraps`` copied onto a face
    is dropped: torch versions that follow it without checking its wrapper id (``innermost_fn``)
    would compile or disable that host function in the tuner's place."""
    fn.__dict__.pop("_torchdynamo_orig_callable", None)
    fn.__dict__.pop("_torchdynamo_wrapper_id", None)
    fn._torchdynamo_disable = True  # type: ignore[attr-defined]
    fn._torchdynamo_disable_msg = message  # type: ignore[attr-defined]
    fn._torchdynamo_disable_recursive = True  # type: ignore[attr-defined]
    skip_everything_in(fn.__code__)


def skip_everything_in(code: types.CodeType) -> bool:
    """Have Dynamo skip frames of ``code`` and every frame they call (False: this torch cannot)."""
    if code in _skipped:
        return True
    with _lock:
        try:
            import torch

            eval_frame = torch._C._dynamo.eval_frame
            action = eval_frame._FrameAction
            eval_frame.set_code_exec_strategy(code, eval_frame._FrameExecStrategy(action.SKIP, action.SKIP))
        except (ImportError, AttributeError, TypeError, RuntimeError):
            return False
        _skipped.add(code)
    return True
