"""A stand-in for Triton's compile step where no compiler exists (the interpreter on the CPU).

Only the compile step is replaced: ``InterpretedFunction.run(..., warmup=True)`` (Triton's
compile-only path, a no-op under the interpreter) and the first launch of a specialisation
"compile" here: the specialisation's key (kernel source + constexpr and launch options) names a
real entry of Triton's real file cache (``triton.runtime.cache.get_cache_manager``: binary,
metadata, group file, in Triton's layout under ``TRITON_CACHE_DIR``), after a sleep in place of
``ptxas`` (a subprocess: it releases the GIL, as the stand-in's sleep does). Launches then run
in the real interpreter, on real threads, with real files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
from typing import Any

import pytest

COMPILE_S = 0.05


@dataclasses.dataclass
class Compiled:
    """What the stand-in returns for a compile: what a CompiledKernel offers the project."""

    hash: str
    name: str


@dataclasses.dataclass
class Event:
    key: str
    kind: str  # "warmup" (compile pass) or "launch" (compiled at a first launch)
    thread: int
    start: float
    end: float
    options: dict[str, Any]


class StandInCompiler:
    def __init__(self, fail_when: dict[str, Any] | None = None) -> None:
        self.lock = threading.Lock()
        self.events: list[Event] = []
        self.launches: list[tuple[float, dict[str, Any]]] = []
        self.compiled: dict[str, Compiled] = {}
        self.fail_when = fail_when or {}
        self.in_flight = 0
        self.max_in_flight = 0

    @staticmethod
    def options(kwargs: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")
                and isinstance(v, (int, float, str, bool))}

    def key(self, fn: Any, kwargs: dict[str, Any]) -> str:
        import inspect

        text = inspect.getsource(fn.fn) + json.dumps(self.options(kwargs), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def compile(self, fn: Any, kwargs: dict[str, Any], kind: str) -> Compiled:
        from triton.compiler.errors import CompilationError
        from triton.runtime.cache import get_cache_manager

        key = self.key(fn, kwargs)
        with self.lock:
            if key in self.compiled:
                return self.compiled[key]
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        start = time.perf_counter()
        try:
            time.sleep(COMPILE_S)
            options = self.options(kwargs)
            if self.fail_when and all(options.get(k) == v for k, v in self.fail_when.items()):
                raise CompilationError(None, None, f"stand-in: {options} does not compile")
            name = fn.fn.__name__
            manager = get_cache_manager(key)
            binary = manager.put(hashlib.sha256(key.encode()).digest() * 8, f"{name}.cubin")
            meta = manager.put(json.dumps({"name": name, "options": options}), f"{name}.json", binary=False)
            manager.put_group(f"{name}.json", {f"{name}.cubin": binary, f"{name}.json": meta})
            compiled = Compiled(key, name)
        finally:
            with self.lock:
                self.in_flight -= 1
        with self.lock:
            self.compiled[key] = compiled
            self.events.append(Event(key, kind, threading.get_ident(), start, time.perf_counter(), options))
        return compiled

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


def _standin_run(compiler: StandInCompiler, original: Any) -> Any:
    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        if warmup:
            return compiler.compile(self, kwargs, "warmup")
        compiler.compile(self, kwargs, "launch")  # a first launch compiles; later ones find it
        with compiler.lock:
            compiler.launches.append((time.perf_counter(), compiler.options(kwargs)))
        return original(self, *args, grid=grid, warmup=False, **kwargs)

    return run


def install_standin() -> StandInCompiler:
    """For a whole process (a Ray worker that imports a test target): no undo."""
    from triton.runtime.interpreter import InterpretedFunction

    compiler = StandInCompiler()
    InterpretedFunction.run = _standin_run(compiler, InterpretedFunction.run)
    return compiler


def _install_for_test(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> StandInCompiler:
    from triton.runtime.interpreter import InterpretedFunction

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    compiler = StandInCompiler()
    monkeypatch.setattr(InterpretedFunction, "run", _standin_run(compiler, InterpretedFunction.run))
    return compiler


@pytest.fixture
def standin(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> StandInCompiler:
    """Install the stand-in compile step on the interpreter (see the module docstring). Only
    kernels decorated under Triton's interpreter (``TRITON_INTERPRET=1``) go through it."""
    return _install_for_test(tmp_path, monkeypatch)


@pytest.fixture
def compiler(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> StandInCompiler | None:
    """This machine's compile step, into a private Triton cache: the stand-in under Triton's
    interpreter (see :func:`standin`), else None: Triton's real compiler (a GPU)."""
    import os

    if os.environ.get("TRITON_INTERPRET") == "1":
        return _install_for_test(tmp_path, monkeypatch)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    return None

