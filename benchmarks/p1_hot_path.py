"""P1 cached-call overhead: what a tuned call costs once the key's best config is known.

**The headline** ("over the host function", issue 16: min and median over rounds) is measured
call by call (``common.alternating_ns(typical=True)``: every iteration runs each statement once,
each timed on its own, a round's figure the median of its calls, forward and reverse order in
turns) with four statements taking turns: the host function, the tuner, ``key_fn`` + host and
``lookup_caller`` (the least any tuner keyed by ``key_fn`` does). A round's difference compares
calls microseconds apart: the H200 lease's host moves by ~5 µs per call between rounds on a
~19 µs host call, which cancels.

Why four and not every statement (the headline until 2026-12-04): with eleven statements taking
turns, where a statement sits in the loop moves it by more than the tuner costs. The H200 read
``key_fn`` + host — the host's own call and more — 1.44 µs *under* the host in forward rounds and
1.32 µs over it in reverse ones (run DD, 2026-12-04 13:15-13:22 UTC), the tuner 0.87 against 1.32 µs
over it, ``lookup_caller`` 0.93 µs under it against 1.23 over: no keyed tuner could be told from
the noise of its position. With four, the two orders agreed within 0.1 µs and ``key_fn`` + host
read 0.49 / 0.56 µs over the host (the example's ``key_fn``'s cost). The benchmark prints that
check (``order_check_ns``: ``key_fn`` + host over the host, forward and reverse, per way of
measuring): a way of measuring whose check reads a negative cost cannot carry the headline.

The other ways, printed as diagnostics: every statement taking turns, call by call; the same
with an untimed ``other()`` before every timed call (other code of a step: a torch op's launch on
the GPU), so that each statement starts from the same state; in blocks of calls taking turns
(``common.interleaved_ns``: a round runs each statement ``number`` times in a row, its figure the
mean). The statements:

- ``host``: the host function called directly with the best config;
- ``key_fn+host``: ``key_fn`` and then the host function, inline (what any tuner must do);
- ``wrapper``: the minimal Python wrapper
  ``def w(*a, **k): key = key_fn(*a, **k); return fn(*a, **k, **cfg)``;
- ``lookup_wrapper``: the same with the key's dict lookup
  (``return fn(*a, **k, **table[key_fn(*a, **k)])``);
- ``lookup_caller``: the key's dict lookup of a generated caller with the config's fields as
  keyword constants (``return callers[key_fn(*a)](*a)``), the face's own design without anything
  else: the least any tuner keyed by ``key_fn`` does;
- ``autotuner``: the ``triton_dist.tune.autotune`` tuner, cached (and ``autotuner_kw``: the same
  call with a business keyword argument);
- on a GPU, ``triton.autotune``: the same kernel under plain ``triton.autotune``, cached, and
  ``triton.autotune_host``: the same kernel launched with its config, the way that decorator does.

Targets (issues 8 and 16): <= 0.5 us over ``key_fn`` + host on the CPU machine (a minimal wrapper
costs ~0.4 us there), <= 1 us over the host function on an H200 in every run.
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

    def lookup_wrapper(*a: Any, **k: Any) -> Any:
        return host(*a, **k, **table[key_fn(*a, **k)])

    callers = {key_fn(3, 4): _callers.bind(host, cfg, 2)}

    def lookup_caller(*a: Any) -> Any:  # the least any tuner keyed by key_fn does
        return callers[key_fn(*a)](*a)

    junk = list(range(64))
    ns = {"host": host, "key_fn": key_fn, "cfg": cfg, "wrapper": wrapper, "tuned": tuned,
          "lookup_wrapper": lookup_wrapper, "lookup_caller": lookup_caller, "other": lambda: sum(junk)}
    stmts = {
        "host": "host(3, 4, **cfg)",
        "autotuner": "tuned(3, 4)",
        "wrapper": "wrapper(3, 4)",
        "lookup_wrapper": "lookup_wrapper(3, 4)",
        "lookup_caller": "lookup_caller(3, 4)",
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
    # the headline: call by call, the tuner taking turns with the calls it is compared with; the
    # host's speed before and after it (a Python loop's time: on the H200 leases it moved 2x, and
    # every figure here with it: the host call 17 us and the example's key_fn 0.5 us over it in
    # one run, 38 us and 1.6 us in another, 2026-12-04 runs DD and FF)
    four = ["host", "autotuner", "key_fn+host", "lookup_caller"]  # both cases have the four
    host_loop = [common.host_loop_ms()]
    among_four = common.alternating_ns({n: stmts[n] for n in four}, ns, number=number, rounds=rounds,
                                       setup=setup, typical=True)
    host_loop.append(common.host_loop_ms())
    early = [a - b for a, b in zip(among_four["autotuner"], among_four["host"], strict=True)]
    # said at once: on a slow host the diagnostics below may outlast a device run's time limit
    print(f"headline first (the four statements taking turns): {min(early):.0f} ns over the host function "
          f"(minimum round), {statistics.median(early):.0f} ns (median over rounds); the host's loop "
          f"{host_loop[0]:.2f} / {host_loop[1]:.2f} ms", flush=True)
    # diagnostics: in blocks; every statement taking turns call by call; the same with every call
    # right after the same other code (an untimed ``other()``), each statement starting from the
    # same state where without it each starts from what its predecessor left
    per_round = common.interleaved_ns(stmts, ns, number=number, rounds=rounds, setup=setup)
    per_call = common.alternating_ns(stmts, ns, number=number, rounds=rounds, setup=setup, typical=True)
    after_other = common.alternating_ns(stmts, ns, number=number, rounds=rounds, setup=setup, typical=True,
                                        interlude="other()")
    ns_per_call = {name: min(values) for name, values in per_round.items()}

    def over(values: dict[str, list[float]], name: str, base: str) -> list[float]:
        """``name`` minus ``base``, round by round (each round's two figures are calls
        microseconds apart: the host's speed between rounds cancels)."""
        return [a - b for a, b in zip(values[name], values[base], strict=True)]

    def by_order(diffs: list[float]) -> dict[str, float]:  # even rounds forward, odd ones reversed
        return {"forward": statistics.median(diffs[0::2]), "reverse": statistics.median(diffs[1::2] or diffs)}

    over_host = over(among_four, "autotuner", "host")
    all_over_host = over(per_call, "autotuner", "host")
    after_over_host = over(after_other, "autotuner", "host")
    blocks_over_host = over(per_round, "autotuner", "host")
    # the check of a way of measuring: key_fn + host does the host's call and more, so a negative
    # reading in either order says the position of a statement moves it more than what it does
    order_check = {"four statements": by_order(over(among_four, "key_fn+host", "host")),
                   "every statement": by_order(over(per_call, "key_fn+host", "host")),
                   "after other code": by_order(over(after_other, "key_fn+host", "host"))}
    base, wrap, mine = ns_per_call["key_fn+host"], ns_per_call["wrapper"], ns_per_call["autotuner"]
    med = statistics.median
    summary: dict[str, Any] = {
        # the headline (issue 16: minimum and median over rounds)
        "overhead_over_host_median_ns": med(over_host),
        "overhead_over_host_min_round_ns": min(over_host),
        "overhead_over_host_median_by_order_ns": by_order(over_host),
        "overhead_over_key_fn_host_median_ns": med(over(among_four, "autotuner", "key_fn+host")),
        "overhead_over_lookup_caller_median_ns": med(over(among_four, "autotuner", "lookup_caller")),
        "lookup_caller_over_host_median_ns": med(over(among_four, "lookup_caller", "host")),
        "order_check_ns": order_check,
        "host_loop_ms": host_loop,  # before and after the headline's rounds (common.host_loop_ms)
        # every statement taking turns, call by call (the headline until 2026-12-04)
        "all_statements_over_host_median_ns": med(all_over_host),
        "all_statements_over_host_min_round_ns": min(all_over_host),
        "all_statements_over_host_median_by_order_ns": by_order(all_over_host),
        "all_statements_over_lookup_caller_median_ns": med(over(per_call, "autotuner", "lookup_caller")),
        "tuner_over_wrapper_median_ns": med(over(per_call, "autotuner", "wrapper")),
        # the same after other code
        "after_other_over_host_median_ns": med(after_over_host),
        "after_other_over_host_min_round_ns": min(after_over_host),
        "after_other_over_key_fn_host_median_ns": med(over(after_other, "autotuner", "key_fn+host")),
        "after_other_tuner_over_wrapper_median_ns": med(over(after_other, "autotuner", "wrapper")),
        "after_other_tuner_over_lookup_wrapper_median_ns": med(over(after_other, "autotuner", "lookup_wrapper")),
        "after_other_lookup_wrapper_over_host_median_ns": med(over(after_other, "lookup_wrapper", "host")),
        # in blocks (min over rounds of each statement's mean per call)
        "autotuner_ns": mine,
        "wrapper_ns": wrap,
        "overhead_ns": mine - base,
        "overhead_over_host_ns": mine - ns_per_call["host"],
        "blocks_overhead_over_host_median_ns": med(blocks_over_host),
        "blocks_overhead_over_host_min_round_ns": min(blocks_over_host),
        "blocks_tuner_over_wrapper_median_ns": med(over(per_round, "autotuner", "wrapper")),
        "host_call_spread_ns": {"blocks": statistics.pstdev(per_round["host"]),
                                "calls": statistics.pstdev(among_four["host"])},
        "wrapper_overhead_ns": wrap - base,
        "ratio_vs_wrapper": mine / wrap,
        "overhead_ratio_vs_wrapper": (mine - base) / (wrap - base) if wrap > base else None,
    }
    if "triton.autotune" in ns_per_call:
        summary["triton_autotune_overhead_ns"] = ns_per_call["triton.autotune"] - ns_per_call["triton.autotune_host"]
    print(common.md_table(["call", "ns per call", "over key_fn+host (ns)"],
                          [[k, v, v - base] for k, v in ns_per_call.items()]))
    for title, values in (("every statement taking turns", per_call), ("after other code", after_other),
                          (f"{', '.join(four)} taking turns (the headline)", among_four)):
        print(common.md_table(["call", f"ns per call, the typical call (median over rounds), {title}"],
                              [[k, med(v)] for k, v in values.items()]))
    print("\norder check (key_fn + host over the host, ns, forward / reverse rounds; a negative figure says "
          "the statements' positions move them more than their work): "
          + "; ".join(f"{way} {c['forward']:.0f} / {c['reverse']:.0f}" for way, c in order_check.items()))
    print(f"\ndiagnostics, over the host function: every statement taking turns {min(all_over_host):.0f} ns "
          f"(minimum round), {med(all_over_host):.0f} ns (median over rounds; forward / reverse "
          f"{summary['all_statements_over_host_median_by_order_ns']['forward']:.0f} / "
          f"{summary['all_statements_over_host_median_by_order_ns']['reverse']:.0f}); after other code "
          f"{min(after_over_host):.0f} / {med(after_over_host):.0f} ns (over the minimal wrapper with the key's "
          f"lookup {summary['after_other_tuner_over_lookup_wrapper_median_ns']:.0f} ns); in blocks "
          f"{min(blocks_over_host):.0f} / {med(blocks_over_host):.0f} ns; the host call's spread over rounds "
          f"{summary['host_call_spread_ns']['blocks']:.0f} ns in blocks, "
          f"{summary['host_call_spread_ns']['calls']:.0f} ns of the typical call")
    print(f"\nover the host function (P1's headline: {', '.join(four)} taking turns, the typical call): "
          f"{min(over_host):.0f} ns (minimum round), {med(over_host):.0f} ns (median over rounds); over "
          f"key_fn+host {summary['overhead_over_key_fn_host_median_ns']:.0f} ns; over lookup_caller "
          f"{summary['overhead_over_lookup_caller_median_ns']:.0f} ns (the least a tuner keyed by key_fn does, "
          f"itself {summary['lookup_caller_over_host_median_ns']:.0f} ns over the host); the host's Python loop "
          f"{host_loop[0]:.2f} ms before, {host_loop[1]:.2f} ms after (common.host_loop_ms)")
    print(f"\nautotuner overhead in blocks {mine - base:.0f} ns over key_fn+host (target <= 500 ns on the CPU "
          f"machine); minimal wrapper {wrap - base:.0f} ns; autotuner / wrapper = {mine / wrap:.3f}; target on "
          f"an H200: <= 1000 ns over the host function (the headline above)")
    common.write_result("p1_hot_path", args, {"rounds": rounds, "number": number, "statements": stmts},
                        {"ns_per_call": ns_per_call, "ns_per_round": per_round,
                         "ns_per_round_typical_call": per_call,
                         "ns_per_round_typical_call_after_other": after_other,
                         "ns_per_round_typical_call_among_four": among_four}, summary, backend)
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
