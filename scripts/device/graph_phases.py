"""Where the wall of one tuning goes (P2), eager and graphs=True, for examples/scale.py's kernel at
2^24 and 2^26 elements (and with ``--gemm`` examples/gemm.py at 2048^2): the measurement's phases
(triton_dist._measure.rounds debug line) and the whole ``tune()`` around it. Prints lines; run on the GPU machine."""

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
    logging.getLogger("triton_dist._measure.rounds").setLevel(logging.DEBUG)
    import triton

    space = [{"cfg": triton.Config({"BLOCK": b}, num_warps=w)} for b in (256, 512, 1024, 2048, 4096) for w in (2, 4, 8)]
    cases = [(f"n=2^{n.bit_length() - 1}", host, space, key_fn, None, (torch.randn(n, device="cuda"), 2.0))
             for n in (2**24, 2**26)]
    if "--gemm" in sys.argv:  # examples/gemm.py at 2048^2 fp16 (P2's GEMM case)
        from examples import gemm

        g = torch.Generator(device="cpu").manual_seed(2048)
        a, b = (torch.randn(2048, 2048, generator=g).to(torch.float16).cuda() for _ in range(2))
        cases.append(("gemm 2048", gemm.matmul.fn, gemm.configs(), gemm.key_fn, gemm.prune_fn, (a, b)))
    for label, fn, configs, key, prune, args in cases:
        for name, options in (("eager", {}), ("graphs", {"graphs": True}),
                              ("graphs, restore_inplace=False", {"graphs": True, "restore_inplace": False})):
            tuner = autotune(configs, key, prune, **options)(fn)
            tuner.tune(*args, force=True, write_cache=False)  # compiles
            for _ in range(2):
                torch.cuda.synchronize()
                start = time.perf_counter()
                tuner.tune(*args, force=True, write_cache=False)
                torch.cuda.synchronize()
                print(f"{label} {name}: tune() {1e3 * (time.perf_counter() - start):.2f} ms")


if __name__ == "__main__":
    main()
