"""Does the face's Dynamo mark cost a call (P1, issue 16)? The face of P1's GPU case timed call by
call (after the same other code, as P1 times it) beside the same function over a copy of its code
object (no frame strategy set on it: ``_torch_compile.skip_everything_in``), beside
``lookup_caller`` and ``key_fn`` + the host function, four statements taking turns (P1 has
eleven); and whether torch._dynamo is imported (its frame hook installed) there.

Run on the GPU machine: python3 scripts/device/face_marked.py [rounds]"""

from __future__ import annotations

import statistics
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import common
import p1_hot_path

from triton_dist._backends import get_backend


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    common.private_cache_dir()
    stmts, ns = p1_hot_path.gpu_case(get_backend())
    face = ns["tuned"]
    ns["unmarked"] = types.FunctionType(face.__code__.replace(), face.__globals__, "unmarked", face.__defaults__,
                                        face.__closure__)
    print("torch._dynamo imported:", "torch._dynamo" in sys.modules)
    chosen = {name: stmts[name] for name in ("host", "autotuner", "lookup_caller", "key_fn+host")}
    chosen["unmarked"] = "unmarked(x, 2.5)"
    for interlude in (None, "other()"):
        values = common.alternating_ns(chosen, ns, number=500, rounds=rounds, setup="sync()", typical=True,
                                       interlude=interlude)
        host = values["host"]
        print(f"{'after other code' if interlude else 'call by call'}: median over rounds, ns over the host: "
              + ", ".join(f"{name} {statistics.median(a - h for a, h in zip(v, host, strict=True)):.0f}"
                          for name, v in values.items() if name != "host"))


if __name__ == "__main__":
    main()
