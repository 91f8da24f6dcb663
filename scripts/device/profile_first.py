"""Profile a seeded fresh process's first call with the winner's binaries shipped (P8, issue 23):
one tuning process ships its binaries, then a fresh process runs the first call under cProfile
(``P8_PROFILE``). Usage: ``python scripts/device/profile_first.py OUT_DIR [kernel]``."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import p8_compile


def main() -> None:
    out, name = Path(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else "matmul")
    with tempfile.TemporaryDirectory(prefix="p8prof_") as tmp:
        t = Path(tmp)
        dirs = {k: t / k for k in ("tc_tune", "td", "tc_shipped", "tc_empty")}
        for d in dirs.values():
            d.mkdir()
        tune = p8_compile._spawn("tune", name, False, dirs["tc_tune"], dirs["td"], 16, [str(dirs["tc_shipped"])])
        print("tune", json.dumps(tune)[:1500])
        for label, cache in (("shipped", dirs["tc_shipped"]), ("empty", dirs["tc_empty"])):
            os.environ["P8_PROFILE"] = str(out / f"first_{label}.prof.txt")
            first = p8_compile._spawn("first", name, False, cache, dirs["td"], 16)
            print(label, json.dumps(first)[:1500])
        shipped = dirs["tc_shipped"]
        print("shipped cache files:", sorted(str(p.relative_to(shipped)) for p in shipped.rglob("*"))[:80])


if __name__ == "__main__":
    main()
