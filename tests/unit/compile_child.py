"""Real Triton compiles of the compile pass, run in a fresh interpreter (tests/unit/test_compile_processes.py).

Triton's compiler needs ``TRITON_INTERPRET=0`` from Triton's import on (the interpreter replaces
``triton.language``'s own jit functions), while the other tests run under the interpreter: so
these scenarios run here, in a child process, and print what they saw as JSON.

No GPU exists here, and none is needed to compile: the installed Triton ships ``ptxas`` and
compiles for an explicit target. ``benchmarks/compile_only.py``'s driver, made Triton's active
driver, gives ``JITFunction.run(..., warmup=True)`` what it asks a driver (the current device,
stream and target) and nothing else; launching anything with it fails.

Every call of Triton's compile entry point (``triton.compiler.compile``, what ``JITFunction``
compiles with) appends one line to ``$COMPILE_LOG``: the process id, start and end, whether it
was an on-disk cache hit (Triton's ``knobs.compilation.listener``) and the kernel's constexprs.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import compile_only  # noqa: E402 - the compile-only Triton driver (benchmarks/compile_only.py)
import tutorial_kernels as tk  # noqa: E402 - Triton's tutorial kernels (code this project did not write)

PARENT = os.getpid()


def _constants(src: Any) -> dict[str, Any]:
    names = src.fn.arg_names
    return {names[path[0]]: value for path, value in src.constants.items() if isinstance(value, (int, float))}


def _log(record: dict[str, Any]) -> None:
    with open(os.environ["COMPILE_LOG"], "a") as f:  # one small append per line: atomic
        f.write(json.dumps(record) + "\n")


def _install_recorder(misbehave: dict[int, str]) -> None:
    """Log every compile; a child compiling BLOCK_SIZE in ``misbehave`` crashes or hangs first."""
    from triton import compiler, knobs

    real = compiler.compile
    hits: dict[str, bool] = {}

    def listener(*, src: Any, cache_hit: bool, **_: Any) -> None:
        hits[src.hash()] = cache_hit

    def compile(src: Any, target: Any = None, options: Any = None, _env_vars: Any = None) -> Any:
        block = _constants(src).get("BLOCK_SIZE")
        if os.getpid() != PARENT and block in misbehave:
            if misbehave[block] == "crash":
                os._exit(3)
            _log({"pid": os.getpid(), "hang": block})
            time.sleep(3600)  # "hang": the parent's time-out (or its interrupt) kills it
        start = time.time()
        kernel = real(src, target=target, options=options, _env_vars=_env_vars)
        _log({"pid": os.getpid(), "start": start, "end": time.time(), "hit": hits.get(src.hash()),
              "constants": _constants(src)})
        return kernel

    knobs.compilation.listener = listener
    compiler.compile = compile


def _layer_norm_args() -> tuple:
    x = torch.randn(8, 1000)
    return x, torch.ones(1000), torch.zeros(1000)


def scenario_pass(configs: list[dict[str, Any]], workers: int) -> dict[str, Any]:
    """The function-level compile pass as a miss of ``autotune`` runs it (``precompile_target``)
    over a host function of the tutorial layer norm; its log lines are collected."""
    from triton_dist._backends import get_backend
    from triton_dist._measure import compile as comp
    from triton_dist.tune import autotune

    kernel = triton.jit(tk.layer_norm_fwd_kernel.fn)

    def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, **config: Any) -> torch.Tensor:
        return tk.layer_norm_launch(kernel, x, w, b, **config)

    tuned = autotune(configs, lambda x, w, b: (tuple(x.shape),), compile_workers=workers)(layer_norm)
    results: list[Any] = []
    real = comp.compile_pass
    comp.compile_pass = lambda *a, **k: results.append(real(*a, **k)) or results[-1]  # a spy: what it returned
    notes: list[str] = []
    known = comp.precompile_target(tuned.target, list(range(len(configs))), _layer_norm_args(), {}, False, False,
                                   get_backend(), lambda fmt, *a: notes.append(fmt % a))
    result = results[0]
    out = {"compiled": result.compiled, "failed": result.failed, "eager": result.eager, "known": known,
           "threads_why": result.threads_why, "children": result.children, "fallbacks": result.fallbacks,
           "in_memory": len(kernel.device_caches[0][0]), "notes": notes}
    # a second miss with arguments of the same specialisation (another key of the same kernel)
    again: list[str] = []
    comp.precompile_target(tuned.target, list(range(len(configs))), _layer_norm_args(), {}, False, False,
                           get_backend(), lambda fmt, *a: again.append(fmt % a))
    out["again"] = {"cached": results[1].cached, "children": results[1].children, "notes": again}
    return out


def scenario_contextual(configs: list[dict[str, Any]], workers: int) -> dict[str, Any]:
    """contextual_autotune's precompile of an inner ``@triton.autotune`` kernel's configs."""
    from triton_dist._backends import get_backend
    from triton_dist._measure.compile import precompile_configs

    at = triton.autotune([triton.Config(c) for c in configs], key=["N"])(triton.jit(tk.layer_norm_fwd_kernel.fn))
    x, w, b = _layer_norm_args()
    y, mean, rstd = torch.empty_like(x), torch.empty(8), torch.empty(8)
    args = (x, y, w, b, mean, rstd, x.stride(0), 1000, 1e-5)
    errors = precompile_configs(at, at.configs, args, {"grid": (8,)}, workers, get_backend())
    return {"errors": errors, "in_memory": len(at.fn.device_caches[0][0])}


def _interrupt_when_hung(count: int) -> None:
    path = Path(os.environ["COMPILE_LOG"])
    while not path.exists() or path.read_text().count('"hang"') < count:
        time.sleep(0.05)
    os.kill(PARENT, signal.SIGINT)


def main() -> None:
    warnings.simplefilter("error")  # as the suite (pyproject's filterwarnings): e.g. Python 3.12's fork warning
    spec = json.loads(sys.argv[1])
    if spec.get("no_async"):  # a Triton without AsyncCompileMode (< 3.4, triton-ascend 3.2)
        sys.modules["triton.runtime._async_compile"] = None  # type: ignore[assignment]
    if "timeout_s" in spec:
        from triton_dist._measure import forked

        forked.CHILD_TIMEOUT_S = spec["timeout_s"]
    _install_recorder({int(k): v for k, v in spec.get("misbehave", {}).items()})
    compile_only.activate()
    run = {"pass": scenario_pass, "contextual": scenario_contextual}[spec["scenario"]]
    if "interrupt_when_hung" in spec:  # as Ctrl-C would (to this process only), once that many children hang
        threading.Thread(target=_interrupt_when_hung, args=(spec["interrupt_when_hung"],), daemon=True).start()
    start = time.perf_counter()
    try:
        out = run(spec["configs"], spec["workers"])
    except KeyboardInterrupt:
        out = {"interrupted": True}
    out.update(parent=PARENT, wall_s=time.perf_counter() - start)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
