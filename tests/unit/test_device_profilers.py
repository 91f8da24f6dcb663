"""The device profilers in scripts/device wrap the library's steps by name: a step renamed or moved
(a module split) made one fail with AttributeError at its first line on the GPU machine, where
device time is scarce (tail_anatomy wrapped ``_tuning._prune`` after it had moved to ``_prune``).
Each profiler is imported here on the CPU and every step it wraps must exist."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import re
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STRICT = {"tail_anatomy": "WRAPPED", "gap_anatomy": "LABELS"}  # getattr(owner, name) without a default


@pytest.fixture
def device_scripts(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.syspath_prepend(str(ROOT / "scripts" / "device"))
    yield
    for name in STRICT:
        sys.modules.pop(name, None)


@pytest.mark.parametrize("script", sorted(STRICT))
def test_every_step_a_profiler_wraps_exists(device_scripts, script):
    module = importlib.import_module(script)
    missing = [f"{getattr(owner, '__name__', owner)}.{name}" for owner, name in getattr(module, STRICT[script])
               if not hasattr(owner, name)]
    assert not missing, f"scripts/device/{script}.py wraps steps that do not exist: {missing}"


# What follows checks the device scripts as they stand against the code as it stands, without a
# GPU: the next lease may be 30 minutes on one H200, and a script that stops at its first line there
# costs a machine's start. Every scripts/device/*.py and benchmarks/*.py compiles; every name of the
# project a script imports, reads, wraps or patches exists (and a module-level function a profiler
# replaces is one the package calls through that module); every path and flag the device's shell
# scripts pass exists; every shell script parses; verify5.sh names each PART it handles.

DEVICE = ROOT / "scripts" / "device"
SCRIPTS = sorted([*DEVICE.glob("*.py"), *(ROOT / "benchmarks").glob("*.py")])
SHELL = sorted(DEVICE.glob("*.sh"))
PROJECT = {"triton_dist", "ray_runner", "examples", *(p.stem for p in SCRIPTS)}
PATCHING = {"setattr", "delattr", "getLogger", "import_module", "patch"}  # calls whose string names a target


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _resolve(dotted: list[str]) -> str | None:
    """None where ``dotted`` names something that exists (a module, an attribute of one, a class's
    annotated or slotted field); else what is missing."""
    try:
        obj = importlib.import_module(dotted[0])
    except ImportError as exc:
        return f"{dotted[0]}: {exc}"
    path = dotted[0]
    for name in dotted[1:]:
        if hasattr(obj, name):
            obj = getattr(obj, name)
        elif hasattr(obj, "__path__") and importlib.util.find_spec(f"{path}.{name}") is not None:
            obj = importlib.import_module(f"{path}.{name}")
        elif isinstance(obj, type) and any(name in getattr(k, "__annotations__", {})
                                           or name in (getattr(k, "__slots__", ()) or ()) for k in obj.__mro__):
            return None  # an instance's field
        else:
            return f"{path} has no {name}"
        path = f"{path}.{name}"
    return None


def _chain(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


class _Names:
    """The project's names one script refers to, each as (line, dotted path)."""

    def __init__(self, path: Path) -> None:
        self.tree = ast.parse(path.read_text(), str(path))
        self.bound: dict[str, list[str]] = {}  # a local name -> the project's dotted path it holds
        self.refs: list[tuple[int, list[str]]] = []
        self.wraps: list[tuple[int, list[str]]] = []  # (owner, name) pairs and setattr targets
        tolerated = {id(n) for a in ast.walk(self.tree) if isinstance(a, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == "OTHER_TREES" for t in a.targets)
                     for n in ast.walk(a.value)}  # steps of other trees (A/B runs): skipped where absent
        parents = {id(c): p for p in ast.walk(self.tree) for c in ast.iter_child_nodes(p)}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in PROJECT:
                        self.refs.append((node.lineno, alias.name.split(".")))
                        local = alias.asname or alias.name.split(".")[0]
                        self.bound[local] = alias.name.split(".") if alias.asname else [local]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] in PROJECT:
                for alias in node.names:
                    self.bound[alias.asname or alias.name] = [*node.module.split("."), alias.name]
                    self.refs.append((node.lineno, self.bound[alias.asname or alias.name]))
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Attribute) and not isinstance(parents.get(id(node)), ast.Attribute):
                self._add(self.refs, node.lineno, node, [])
            elif isinstance(node, ast.Call) and len(node.args) >= 2:
                func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                name = node.args[1]
                if func in ("setattr", "delattr") and isinstance(name, ast.Constant) and isinstance(name.value, str):
                    self._add(self.wraps, node.lineno, node.args[0], [name.value])
            elif (isinstance(node, ast.Tuple) and len(node.elts) >= 2 and id(node) not in tolerated
                  and isinstance(node.elts[1], ast.Constant) and isinstance(node.elts[1].value, str)):
                self._add(self.wraps, node.lineno, node.elts[0], [node.elts[1].value])
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                text = node.args[0].value
                if func in PATCHING and isinstance(text, str) and text.split(".")[0] in PROJECT:
                    self.refs.append((node.lineno, text.replace(":", ".").split(".")))

    def _add(self, into: list, line: int, node: ast.AST, more: list[str]) -> None:
        chain = _chain(node)
        if chain and chain[0] in self.bound:
            into.append((line, [*self.bound[chain[0]], *chain[1:], *more]))


@pytest.fixture(scope="module")
def importable():
    saved = list(sys.path)
    sys.path[:0] = [str(ROOT / "benchmarks"), str(DEVICE)]
    yield
    sys.path[:] = saved


@pytest.mark.parametrize("path", SCRIPTS, ids=_rel)
def test_every_name_a_device_script_takes_from_the_project_exists(importable, path):
    compile(path.read_text(), str(path), "exec")
    names = _Names(path)
    missing = sorted({f"line {line}: {problem}" for line, dotted in names.refs + names.wraps
                      if (problem := _resolve(dotted))})
    assert not missing, f"{_rel(path)} names what the code no longer has: {missing}"


def _module(dotted: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(dotted)
    except ImportError:
        return None


@functools.cache
def _reads() -> set[tuple[str, str]]:
    """(module, name) for each name the package reads through its module: by the bare name in the
    module itself, or as ``alias.name`` where alias is the module imported elsewhere."""
    reads = set()
    for top in ("triton_dist", "ray_runner"):
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            package = name if parts[-1] == "__init__" else name.rpartition(".")[0]
            aliases = {}
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        up = package.split(".")[:len(package.split(".")) - node.level + 1]
                        base = ".".join([*up, *([node.module] if node.module else [])])
                    aliases.update({a.asname or a.name: f"{base}.{a.name}" for a in node.names})
                elif isinstance(node, ast.Import):
                    aliases.update({a.asname: a.name for a in node.names if a.asname})
            for node in ast.walk(tree):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    reads.add((name, node.id))
                elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                    reads.add((aliases[node.value.id], node.attr))
    return reads


def test_a_function_a_profiler_replaces_in_a_module_is_called_through_that_module(importable):
    """A module split leaves a re-exported name behind: replacing it there then times nothing (the
    callers hold the new module's copy), and tail_anatomy's anchors are never seen."""
    dead = set()
    for path in SCRIPTS:
        for _, dotted in _Names(path).wraps:
            owner = ".".join(dotted[:-1])
            module = _module(owner) if dotted[0] in ("triton_dist", "ray_runner") else None
            if module is not None and (owner, dotted[-1]) not in _reads():
                dead.add(f"{_rel(path)}: {owner}.{dotted[-1]}")
    assert not dead, f"replaced where no caller reads it: {sorted(dead)}"


def _commands(path: Path) -> list[str]:
    """The script's lines, continuation lines joined, comments left out."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    return [line for line in text.splitlines() if not line.lstrip().startswith("#")]


@pytest.mark.parametrize("path", SHELL, ids=_rel)
def test_a_device_shell_script_parses_and_names_paths_that_exist(path):
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    named = {m.group(0) for line in _commands(path)
             for m in re.finditer(r"\b(?:tests|scripts/device|benchmarks|examples)/[\w/.-]*\w", line)}
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"{_rel(path)} names paths that do not exist: {missing}"


@functools.cache
def _flags(script: Path) -> set[str]:
    tree = ast.parse(script.read_text())
    flags = {a.value for n in ast.walk(tree)
             if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "add_argument"
             for a in n.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")}
    if "common.parser(" in script.read_text():
        flags |= _flags(ROOT / "benchmarks" / "common.py")
    return flags


@pytest.mark.parametrize("path", SHELL, ids=_rel)
def test_every_flag_a_device_shell_script_passes_is_taken(path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        benchmarks = importlib.import_module("run_all").BENCHMARKS
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    calls = [(m.group(1), m.group(2)) for line in _commands(path)
             for m in re.finditer(r"((?:scripts/device|benchmarks)/\w+\.py)([^;|&>]*)", line)]
    # bench.sh's table of arguments run_all.py passes on to each benchmark
    calls += [(f"benchmarks/{benchmarks[k]}.py", v) for k, v in re.findall(r"\[(p\d)\]=\"([^\"]*)\"", path.read_text())]
    for script, args in list(calls):  # run_all.py passes what follows -- to the one benchmark it runs
        only = re.search(r"--only\s+(p\d)\s.*?\s--\s(.*)", args)
        if script.endswith("run_all.py") and only:
            calls += [(f"benchmarks/{benchmarks[only.group(1)]}.py", only.group(2))]
    unknown = sorted({f"{script} {flag}" for script, args in calls
                      for flag in re.findall(r"(?<!\S)--[\w-]+", args.split(" -- ")[0])
                      if flag not in _flags(ROOT / script)})
    assert not unknown, f"{_rel(path)} passes flags the scripts do not take: {unknown}"


def test_verify5_names_every_part_it_handles():
    text = (DEVICE / "verify5.sh").read_text()
    parts = re.findall(r"^  (\w+)\)", text, re.M)
    message = re.search(r'^  \*\) echo "([^"]*)"', text, re.M).group(1)
    assert "final7" in parts, parts
    unnamed = [p for p in parts if not re.search(rf"\b{p}\b", message)]
    assert not unnamed, f"verify5.sh's message for an unknown PART leaves out {unnamed}"


def _fit_out(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f'source "{DEVICE / "prelude.sh"}" && fit_out run'],
                          env={"OUT": str(out), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True)


def test_a_run_that_wrote_more_than_the_device_tool_brings_back_is_packed_whole(tmp_path):
    """The device tool brings back 8 files of $OUT, none below two folders: bench.sh, issue16.sh
    with P2, multirank.sh and some PARTs of verify5.sh wrote more, and the rest stayed on the machine."""
    out = tmp_path / "out"
    written = {"env.txt": "python 3.12", **{f"p{i}.log": f"log {i}" for i in range(8)},
               "multirank/max.rank0.json": "{}", "a/b/c/deep.txt": "deep"}
    for name, text in written.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    _fit_out(out)
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert left == ["env.txt", "run.tar.gz"]
    with tarfile.open(out / "run.tar.gz") as tar:
        packed = {m.name.removeprefix("./"): tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}
    assert packed == written


def test_a_run_within_what_the_device_tool_brings_back_is_left_as_it_is(tmp_path):
    out = tmp_path / "out"
    (out / "p1").mkdir(parents=True)
    for name in ("env.txt", "p7.log", "p1/p1_hot_path.json"):
        (out / name).write_text(name)
    _fit_out(out)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == [
        "env.txt", "p1/p1_hot_path.json", "p7.log"]
