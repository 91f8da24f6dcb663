"""P1 cached-call overhead: what a tuned call costs once the key's best config is known.

Measured in one run, three ways: in blocks of calls taking turns (``common.interleaved_ns``: a
round runs each statement ``number`` times in a row, its figure the mean), and call by call
(``common.alternating_ns(typical=True)``: every iteration runs each statement once, each timed on
its own, a round's figure the median of its calls). The headline "over the host function" is the
call-by-call figure: the H200 lease's host moves by ~5 µs per call between rounds on a ~19 µs
host call (rare stalls of milliseconds inside a round, another tenant's), so the difference of
two rounds' means is mostly that noise; the typical call of each, microseconds from the other's,
is not (issue 16). A third way, call by call again, runs an untimed ``other()`` (other code of a
step: a torch op's launch on the GPU) before every timed call, so that each statement starts from
the same state: without it each starts from what its predecessor left, and on the H200 host the
order moved a statement by ~1 µs (2026-12-02: in the reverse rounds, where the host call follows
the tuner's, even ``key_fn`` + host read 1.16 µs over the host; in the forward rounds 0.56 µs
under it). A fourth way, call by call, has four of the statements take turns (the host, the
tuner, ``key_fn`` + host and, on a GPU, ``lookup_caller``): with fewer statements between two
calls of one, the H200 read the tuner 0-0.28 µs over ``lookup_caller`` where it read 0.6-1.7 µs
among all (2026-12-04). The statements:

- ``host``: the host function called directly with the best config;
- ``key_fn+host``: ``key_fn`` and then the host function, inline (what any tuner must do);
- ``wrapper``: the minimal Python wrapper
  ``def w(*a, **k): key = key_fn(*a, **k); return fn(*a, **k, **cfg)``;
- ``lookup_wrapper``: the same with the key's dict lookup, the least any tuner keyed by ``key_fn``
  does (``return fn(*a, **k, **table[key_fn(*a, **k)])``);
- ``autotuner``: the ``triton_dist.tune.autotune`` tuner, cached (and ``autotuner_kw``: the same
  call with a business keyword argument);
- on a GPU, ``triton.autotune``: the same kernel under plain ``triton.autotune``, cached, and
  ``triton.autotune_host``: the same kernel launched with its config, the way that decorator does.

Overhead = autotuner - key_fn+host. Targets (issue 8): <= 0.5 us on the CPU machine (a minimal
wrapper costs ~0.4 us there), <= 1 us over the host function on H200.
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

import common

from triton_dist import _callers
from triton_dist._backends import get_backend
from triton_dist.tune import autotune


def cpu_case() -> tuple[dict[str, str], dict[str, Any]]:
    """A trivial host function: the tuner's own cost is all there is to see."""
    def host(x: int, y: int, BLOCK: int = 1, num_warps: int = 1) -> int:
        return x

    def key_fn(x: int, y: int, *args: Any, **kwargs: Any) -> tuple:
        return (x,)

    space = [{"BLOCK": 64, "num_warps": 4}, {"BLOCK": 128, "num_warps": 4}]
    tuned = autotune(space, key_fn, do_bench=lambda fn, w, r: [1.0] * r)(host)
    tuned(3, 4)
    cfg = tuned.best_config(3, 4)

    def wrapper(*a: Any, **k: Any) -> Any:
        key = key_fn(*a, **k)  # noqa: F841 - the minimal wrapper computes the key
        return host(*a, **k, **cfg)

    table = {key_fn(3, 4): cfg}

    def lookup_wrapper(*a: Any, **k: Any) -> Any:  # the least any tuner keyed by key_fn does
        return host(*a, **k, **table[key_fn(*a, **k)])

    junk = list(range(64))
    ns = {"host": host, "key_fn": key_fn, "cfg": cfg, "wrapper": wrapper, "tuned": tuned,
          "lookup_wrapper": lookup_wrapper, "other": lambda: sum(junk)}
    stmts = {
        "host": "host(3, 4, **cfg)",
        "autotuner": "tuned(3, 4)",
        "wrapper": "wrapper(3, 4)",
        "lookup_wrapper": "lookup_wrapper(3, 4)",
        "key_fn+host": "key_fn(3, 4); host(3, 4, **cfg)",
        "wrapper_kw": "wrapper(3, y=4)",
        "autotuner_kw": "tuned(3, y=4)",
    }
    return stmts, ns


def gpu_case(backend: Any) -> tuple[dict[str, str], dict[str, Any]]:
    """The examples' elementwise kernel on a tiny tensor (launch cost, not kernel time)."""
    import torch
    import triton

    from examples import scale

    space = [{"cfg": triton.Config({"BLOCK": b}, num_warps=w)} for b in (256, 512, 1024) for w in (4, 8)]
    tuned = autotune(space, scale.key_fn, scale.prune_fn)(scale.scale.fn)
    x = torch.randn(4096, device=backend.device())
    tuned(x, 2.5)
    cfg = tuned.best_config(x, 2.5)
    host = scale.scale.fn

    # plain triton.autotune over the same kernel and configs (its own key: n)
    at_kernel = triton.autotune([c["cfg"] for c in space], key=["n"])(scale.scale_kernel)

    def at_host(x: Any, alpha: float) -> Any:
        y = torch.empty_like(x)
        n = x.numel()
        at_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, alpha, n)
        return y

    at_host(x, 2.5)  # tunes once (triton's own benchmarking)
    best_at = at_kernel.best_config

    def at_direct(x: Any, alpha: float) -> Any:  # what triton.autotune launches, without it
        y = torch.empty_like(x)
        n = x.numel()
        meta = best_at.all_kwargs()
        scale.scale_kernel[(triton.cdiv(n, meta["BLOCK"]),)](x, y, alpha, n, **meta)
        return y

    def wrapper(*a: Any, **k: Any) -> Any:
        key = scale.key_fn(*a, **k)  # noqa: F841
        return host(*a, **k, **cfg)

    table, key_fn = {scale.key_fn(x, 2.5): cfg}, scale.key_fn

    def lookup_wrapper(*a: Any, **k: Any) -> Any:  # the least any tuner keyed by key_fn does
        return host(*a, **k, **table[key_fn(*a, **k)])

    # the lookup wrapper's two halves of the face's design (issue 16, 2026-12-04): the lookup with
    # the config's fields passed as keyword constants by a generated caller (what the face does),
    # and the config merged into the call without the caller's business keywords
    callers = {scale.key_fn(x, 2.5): _callers.bind(host, cfg, 2)}

    def lookup_caller(*a: Any) -> Any:
        return callers[key_fn(*a)](*a)

    def lookup_plain(*a: Any) -> Any:
        return host(*a, **table[key_fn(*a)])

    ns = {"host": host, "key_fn": scale.key_fn, "cfg": cfg, "wrapper": wrapper, "tuned": tuned, "x": x,
          "at_host": at_host, "at_direct": at_direct, "sync": backend.synchronize,
          "lookup_wrapper": lookup_wrapper, "lookup_caller": lookup_caller, "lookup_plain": lookup_plain,
          "other": lambda: x.mul(2.0)}  # other code of the step: a torch op's launch
    stmts = {
        "host": "host(x, 2.5, **cfg)",
        "autotuner": "tuned(x, 2.5)",
        "wrapper": "wrapper(x, 2.5)",
        "lookup_wrapper": "lookup_wrapper(x, 2.5)",
        "lookup_caller": "lookup_caller(x, 2.5)",
        "lookup_plain": "lookup_plain(x, 2.5)",
        "key_fn+host": "key_fn(x, 2.5); host(x, 2.5, **cfg)",
        "wrapper_kw": "wrapper(x, alpha=2.5)",
        "autotuner_kw": "tuned(x, alpha=2.5)",
        "triton.autotune_host": "at_direct(x, 2.5)",
        "triton.autotune": "at_host(x, 2.5)",
    }
    return stmts, ns


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--number", type=int, default=20000)
    args = p.parse_args(argv)
    common.private_cache_dir()
    backend = get_backend()
    if backend.kind == "cpu":
        stmts, ns = cpu_case()
        number, setup = args.number, "pass"
    else:
        stmts, ns = gpu_case(backend)
        # drain the queue between rounds; rounds of 1/40 of --number calls (500 of the default
        # 20,000, ~10 ms on the H200): a short round is less often hit by the host's noise, and
        # a paired difference compares two rounds ~10 ms apart
        number, setup = max(1, args.number // 40), "sync()"
    rounds = 3 if args.quick else args.rounds
    number = min(number, 2000) if args.quick else number
    per_round = common.interleaved_ns(stmts, ns, number=number, rounds=rounds, setup=setup)
    per_call = common.alternating_ns(stmts, ns, number=number, rounds=rounds, setup=setup, typical=True)
    # every call right after the same other code (an untimed ``other()``): each statement starts
    # from the same state, where without it each starts from what its predecessor left (order
    # effects of ~1 µs on the H200 host, in both directions)
    after_other = common.alternating_ns(stmts, ns, number=number, rounds=rounds, setup=setup, typical=True,
                                        interlude="other()")
    # the same call by call with four statements taking turns instead of all of them: on the H200
    # the face read 0.6-1.7 µs over ``lookup_caller`` among eleven, 0-0.28 µs among four
    # (2026-12-04, scripts/device/face_marked.py): how many statements run between two calls of
    # one moves it, not what it does
    four = [n for n in ("host", "autotuner", "key_fn+host", "lookup_caller") if n in stmts]
    among_four = common.alternating_ns({n: stmts[n] for n in four}, ns, number=number, rounds=rounds,
                                       setup=setup, typical=True)
    four_over_host = [a - h for a, h in zip(among_four["autotuner"], among_four["host"], strict=True)]
    four_over_lookup = ([a - b for a, b in zip(among_four["autotuner"], among_four["lookup_caller"], strict=True)]
                        if "lookup_caller" in among_four else None)
    ns_per_call = {name: min(values) for name, values in per_round.items()}
    # minima and medians over rounds (issue 16 asks for both); differences are taken round by
    # round: of the typical calls in ``per_call`` (each "autotuner" call right after a "host"
    # call), of the blocks in ``per_round`` ("autotuner" right after "host", before it in odd rounds)
    over_host = [a - h for a, h in zip(per_call["autotuner"], per_call["host"], strict=True)]
    after_over_host = [a - h for a, h in zip(after_other["autotuner"], after_other["host"], strict=True)]
    after_over_wrapper = [a - w for a, w in zip(after_other["autotuner"], after_other["wrapper"], strict=True)]
    after_over_lookup = [a - w for a, w in zip(after_other["autotuner"], after_other["lookup_wrapper"],
                                               strict=True)]
    lookup_over_host = [w - h for w, h in zip(after_other["lookup_wrapper"], after_other["host"], strict=True)]
    after_over_key_fn_host = [a - b for a, b in zip(after_other["autotuner"], after_other["key_fn+host"],
                                                    strict=True)]
    over_wrapper = [a - w for a, w in zip(per_call["autotuner"], per_call["wrapper"], strict=True)]
    blocks_over_host = [a - h for a, h in zip(per_round["autotuner"], per_round["host"], strict=True)]
    blocks_over_wrapper = [a - w for a, w in zip(per_round["autotuner"], per_round["wrapper"], strict=True)]
    base, wrap, mine = ns_per_call["key_fn+host"], ns_per_call["wrapper"], ns_per_call["autotuner"]
    summary: dict[str, Any] = {
        "autotuner_ns": mine,
        "wrapper_ns": wrap,
        "overhead_ns": mine - base,
        "overhead_over_host_ns": mine - ns_per_call["host"],
        "overhead_over_host_median_ns": statistics.median(over_host),
        "overhead_over_host_min_round_ns": min(over_host),
        # the order's share: even rounds run the statements forward (the tuner right after the
        # host call), odd ones in reverse (the tuner right after the minimal wrapper)
        "overhead_over_host_median_by_order_ns": {"forward": statistics.median(over_host[0::2]),
                                                  "reverse": statistics.median(over_host[1::2] or over_host)},
        "overhead_over_key_fn_host_median_ns": statistics.median(
            a - b for a, b in zip(per_call["autotuner"], per_call["key_fn+host"], strict=True)),
        "after_other_over_host_median_ns": statistics.median(after_over_host),
        "after_other_over_host_min_round_ns": min(after_over_host),
        "after_other_over_key_fn_host_median_ns": statistics.median(after_over_key_fn_host),
        "after_other_tuner_over_wrapper_median_ns": statistics.median(after_over_wrapper),
        # the floor of any tuner keyed by key_fn: the minimal wrapper with the key's dict lookup
        "after_other_tuner_over_lookup_wrapper_median_ns": statistics.median(after_over_lookup),
        "after_other_lookup_wrapper_over_host_median_ns": statistics.median(lookup_over_host),
        "blocks_overhead_over_host_median_ns": statistics.median(blocks_over_host),
        "blocks_overhead_over_host_min_round_ns": min(blocks_over_host),
        "host_call_spread_ns": {"blocks": statistics.pstdev(per_round["host"]),
                                "calls": statistics.pstdev(per_call["host"])},
        "wrapper_overhead_ns": wrap - base,
        # the tuner's own cost: what it adds to the minimal wrapper (the same key_fn and call)
        "tuner_over_wrapper_median_ns": statistics.median(over_wrapper),
        "blocks_tuner_over_wrapper_median_ns": statistics.median(blocks_over_wrapper),
        "four_statements_over_host_median_ns": statistics.median(four_over_host),
        "four_statements_over_host_min_round_ns": min(four_over_host),
        "four_statements_over_key_fn_host_median_ns": statistics.median(
            a - b for a, b in zip(among_four["autotuner"], among_four["key_fn+host"], strict=True)),
        "four_statements_over_lookup_caller_median_ns": (statistics.median(four_over_lookup)
                                                         if four_over_lookup else None),
        "ratio_vs_wrapper": mine / wrap,
        "overhead_ratio_vs_wrapper": (mine - base) / (wrap - base) if wrap > base else None,
    }
    if "triton.autotune" in ns_per_call:
        summary["triton_autotune_overhead_ns"] = ns_per_call["triton.autotune"] - ns_per_call["triton.autotune_host"]
    print(common.md_table(["call", "ns per call", "over key_fn+host (ns)"],
                          [[k, v, v - base] for k, v in ns_per_call.items()]))
    print(common.md_table(["call", "ns per call, the typical call (median over rounds)"],
                          [[k, statistics.median(v)] for k, v in per_call.items()]))
    print(common.md_table(["call", "ns per call after other code, the typical call (median over rounds)"],
                          [[k, statistics.median(v)] for k, v in after_other.items()]))
    print(f"\nover the host function, every call after the same other code: {min(after_over_host):.0f} ns "
          f"(minimum round), {statistics.median(after_over_host):.0f} ns (median over rounds); over "
          f"key_fn+host {statistics.median(after_over_key_fn_host):.0f} ns; over the minimal wrapper "
          f"{statistics.median(after_over_wrapper):.0f} ns; over the minimal wrapper with the key's lookup "
          f"{statistics.median(after_over_lookup):.0f} ns (which is itself "
          f"{statistics.median(lookup_over_host):.0f} ns over the host)")
    print(f"\nover the host function, the typical call: {min(over_host):.0f} ns (minimum round), "
          f"{statistics.median(over_host):.0f} ns (median over rounds); in blocks: "
          f"{min(blocks_over_host):.0f} / {statistics.median(blocks_over_host):.0f} ns; over the minimal "
          f"wrapper: {statistics.median(over_wrapper):.0f} ns (the typical call, median over rounds); "
          f"the host call's spread over rounds: {summary['host_call_spread_ns']['blocks']:.0f} ns in "
          f"blocks, {summary['host_call_spread_ns']['calls']:.0f} ns of the typical call")
    print(f"\nover the host function with {', '.join(four)} taking turns, the typical call: "
          f"{min(four_over_host):.0f} ns (minimum round), {statistics.median(four_over_host):.0f} ns (median "
          f"over rounds); over key_fn+host {summary['four_statements_over_key_fn_host_median_ns']:.0f} ns"
          + (f"; over lookup_caller {summary['four_statements_over_lookup_caller_median_ns']:.0f} ns"
             if "lookup_caller" in among_four else ""))
    print(f"\nautotuner overhead {mine - base:.0f} ns (target <= 500 ns on the CPU machine, <= 1000 ns "
          f"over the host function on H200); minimal wrapper {wrap - base:.0f} ns; "
          f"autotuner / wrapper = {mine / wrap:.3f}")
    common.write_result("p1_hot_path", args, {"rounds": rounds, "number": number, "statements": stmts},
                        {"ns_per_call": ns_per_call, "ns_per_round": per_round,
                         "ns_per_round_typical_call": per_call,
                         "ns_per_round_typical_call_after_other": after_other,
                         "ns_per_round_typical_call_among_four": among_four}, summary, backend)
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
