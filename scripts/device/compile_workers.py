"""The compile-inclusive first tuning (P8 'parallel') for several compile_workers bounds, each in a
fresh process with an empty Triton cache, plus the measurement alone (a filled Triton cache).
Usage: ``python scripts/device/compile_workers.py KERNEL W1,W2,...``; prints one JSON line each."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import p8_compile


def main() -> None:
    name, workers = sys.argv[1], [int(w) for w in sys.argv[2].split(",")]
    with tempfile.TemporaryDirectory(prefix="p8w_") as tmp:
        t = Path(tmp)
        caches = []
        for n, w in enumerate(workers):
            tc, td = t / f"tc{n}", t / f"td{n}"
            caches.append(tc)
            tc.mkdir()
            td.mkdir()
            r = p8_compile._spawn("tune", name, False, tc, td, w)
            print(json.dumps({"kernel": name, "workers": w, "first_call_s": r.get("first_call_s"),
                              "error": r.get("error", "")[-300:]}), flush=True)
        td = t / "td_measure"
        td.mkdir()
        r = p8_compile._spawn("tune", name, False, caches[0], td, workers[0])
        print(json.dumps({"kernel": name, "measure_only_s": r.get("first_call_s")}), flush=True)


if __name__ == "__main__":
    main()
