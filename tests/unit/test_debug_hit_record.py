"""README ("What it prints and logs"): ``autotune_verbose`` lines, the hit "and where it came
from" among them, are DEBUG records of ``triton_dist.tune``, so that logger at DEBUG "gets them
from every call without ``autotune_verbose``". A tester found the disk hit's line missing: it was
said only with ``autotune_verbose=True``, so a job that set the logger to DEBUG to learn where its
configs came from saw nothing for a hit. Now a disk hit is a DEBUG record (once per key and
process, where the decision is made), and still nothing on stdout."""

from __future__ import annotations

import logging

from triton_dist.tune import autotune

from .helpers import entries


def _key(n, *args, **kwargs):
    return (n,)


def _bench(fn, n_warmup, n_repeat):
    for _ in range(n_warmup):
        fn()
    return [float(fn()) for _ in range(n_repeat)]


@autotune(config_space=[{"c": c} for c in range(3)], key_fn=_key, n_warmup=1, n_repeat=2, do_bench=_bench)
def op(n, c):
    return 3 - c


def test_a_disk_hit_is_a_debug_record_without_autotune_verbose(cache_dir, capsys):
    op(5)  # tunes and writes the entry
    [entry] = entries(cache_dir, "op")
    op.clear()  # forget the in-memory decision: the next call reads the disk cache
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger("triton_dist.tune")
    handler, level = Keep(logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    capsys.readouterr()
    try:
        assert op(5) == 1  # the cached best, config 2
        assert op(5) == 1  # an in-memory hit: said once per key, not again
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    hits = [r for r in records if "cache hit for key (5,)" in r]
    assert len(hits) == 1, records
    assert "test_debug_hit_record.op" in hits[0] and "config 2" in hits[0] and str(entry) in hits[0], hits
    assert capsys.readouterr().out == ""  # nothing on stdout without autotune_verbose


def test_a_disk_hit_logs_nothing_below_debug(cache_dir, capsys):
    op(6)
    op.clear()
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger("triton_dist.tune")
    handler, level = Keep(logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        assert op(6) == 1
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert records == []
    assert capsys.readouterr().out == ""
