"""What a rank prints and logs (``autotune_verbose``, the contextual tuner's INFO line), on real
gloo ranks: every line names its rank. Run through ``harness.run_ranks``."""

from __future__ import annotations

import contextlib
import io
import logging
import os

import torch
import triton
import triton.language as tl

from triton_dist.autotuner import contextual_autotune
from triton_dist.tune import autotune


def _key(n, **_):
    return (n,)


def _bench(fn, n_warmup, n_repeat):
    for _ in range(n_warmup):
        fn()
    return [float(fn()) + 1.0 for _ in range(n_repeat)]


@autotune(config_space=[{"cfg": 0}, {"cfg": 1}], key_fn=_key, n_warmup=1, n_repeat=2, do_bench=_bench)
def said(n, cfg):
    return cfg


def _printed(calls) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for call in calls:
            call()
    return [line for line in out.getvalue().splitlines() if line.startswith("[triton_dist]")]


def verbose_lines(rank, world_size, grouped):
    """A miss, then an in-memory hit, with ``autotune_verbose``: tuning together (a registered
    group) or each rank alone (``set_world_group(None)``)."""
    from triton_dist.dist import init_distributed, set_world_group

    if grouped:
        init_distributed()
    else:
        set_world_group(None)
    return _printed([lambda: said(7, autotune_verbose=True), lambda: said(7, autotune_verbose=True)])


@triton.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def contextual_info(rank, world_size, workdir):
    """The contextual tuner's INFO record of a choice, on a handler the user put on the root."""
    os.chdir(workdir)  # its ./.autotune_logs/ goes there
    kernel = triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64)], key=["n"])(_scale)
    records: list[str] = []
    fields: list[list] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(f"{record.levelname} {record.getMessage()}")
            fields.append([record.getMessage(), *(getattr(record, f, "MISSING")
                                                  for f in ("rank", "world_size", "function", "key"))])

    root = logging.getLogger()
    handler = Keep(logging.INFO)
    root.addHandler(handler)
    root.setLevel(logging.INFO)

    @contextual_autotune(is_dist=True, n_repeat=2, n_warmup=1)
    def outer(x):
        y = torch.empty_like(x)
        kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, x.numel())
        return y

    try:
        outer(torch.ones(128))
    finally:
        root.removeHandler(handler)
    return {"choice": [text for text in records if "contextual tuning" in text and "->" in text],
            "announced": [text for text in records if " logs to " in text],
            "fields": [f for f in fields if "contextual tuning" in f[0] and ("->" in f[0] or " logs to " in f[0])]}


def warnings_said(rank, world_size):
    """A rank alone (no group registered) in cache-only mode: the ungrouped warning, then the
    cache-only miss's (held until the decision is kept), as warnings and as records of a handler
    the user put on the root logger."""
    import warnings

    from triton_dist.errors import TritonDistWarning

    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            if record.name.startswith("triton_dist"):
                records.append(record.getMessage())

    root = logging.getLogger()
    handler = Keep(logging.WARNING)
    root.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            said(7)
    finally:
        root.removeHandler(handler)
    return {"warnings": [str(w.message) for w in caught if issubclass(w.category, TritonDistWarning)],
            "records": records}


@autotune(config_space=[{"cfg": 0}, {"cfg": 1}], key_fn=_key, n_warmup=1, n_repeat=2, do_bench=_bench)
def alone(n, cfg):
    return cfg


def record_fields(rank, world_size):
    """Records of a rank tuning alone (no group registered: its warning and its tuning), then of
    a grouped tuning, at INFO, each with the fields a JSON formatter reads: [level, text, rank,
    world_size, function, key] ("MISSING" where the record has no such field)."""
    import warnings

    from triton_dist.dist import init_distributed

    records: list[list] = []

    class Keep(logging.Handler):
        def emit(self, record):
            if record.name.startswith("triton_dist"):
                records.append([record.levelname, record.getMessage(),
                                *(getattr(record, f, "MISSING") for f in ("rank", "world_size", "function", "key"))])

    root = logging.getLogger()
    handler, level = Keep(logging.INFO), root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            alone(9)
        init_distributed()
        said(9)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    return records
