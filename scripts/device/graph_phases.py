"""Where the wall of one tuning goes (P2), eager and graphs=True, for examples/scale.py's kernel at
2^24 and 2^26 elements: the measurement's phases (triton_dist._rounds debug line) and the whole
``tune()`` around it. Prints lines; run on the GPU machine."""

from __future__ import annotations

import logging
import sys
import time

import torch

from examples.scale import key_fn, scale_kernel
from triton_dist.tune import autotune


def host(x, alpha, *, cfg):
    import triton

    y = torch.empty_like(x)
    meta = cfg.all_kwargs()
    scale_kernel[(triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, alpha, x.numel(), **meta)
    return y


def main() -> None:
    logging.basicConfig(stream=sys.stdout, format="%(message)s")
    logging.getLogger("triton_dist._rounds").setLevel(logging.DEBUG)
    import triton

    space = [{"cfg": triton.Config({"BLOCK": b}, num_warps=w)} for b in (256, 512, 1024, 2048, 4096) for w in (2, 4, 8)]
    for n in (2**24, 2**26):
        x = torch.randn(n, device="cuda")
        for name, options in (("eager", {}), ("graphs", {"graphs": True}),
                              ("graphs, restore_inplace=False", {"graphs": True, "restore_inplace": False})):
            tuner = autotune(space, key_fn, **options)(host)
            tuner.tune(x, 2.0, force=True, write_cache=False)  # compiles
            for _ in range(2):
                torch.cuda.synchronize()
                start = time.perf_counter()
                tuner.tune(x, 2.0, force=True, write_cache=False)
                torch.cuda.synchronize()
                print(f"n=2^{n.bit_length() - 1} {name}: tune() {1e3 * (time.perf_counter() - start):.2f} ms")


if __name__ == "__main__":
    main()
