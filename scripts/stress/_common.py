"""Shared by the stress scripts: child process environment, machine description, summaries."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def child_env(root: Path | str, **extra: str) -> dict[str, str]:
    """Environment of a stress child: this repo importable, the cache root, the CPU device."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["TRITON_DIST_AUTOTUNE_DIR"] = str(root)
    env.setdefault("TRITON_INTERPRET", "1")
    env.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    env.update(extra)
    return env


def spawn(script: Path, *args: Any, env: dict[str, str], **kwargs: Any) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(script), *map(str, args)], env=env, **kwargs)


def machine() -> dict[str, Any]:
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "system": f"{platform.system()} {platform.release()}"}


def finish(summary: dict[str, Any], out: str | None) -> int:
    """Print the summary (and write it to ``out``); exit status 0 when ``summary["ok"]``."""
    summary["machine"] = machine()
    text = json.dumps(summary, indent=2, sort_keys=True)
    print(text)
    if out:
        Path(out).write_text(text + "\n")
    return 0 if summary.get("ok") else 1
