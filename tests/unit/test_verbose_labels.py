"""Every line ``autotune_verbose`` prints, and every DEBUG record of ``triton_dist.tune``, names
the function it is about: two functions tuning at once in threads printed ``config 0 ...`` and
``best config for key (5,) ...`` lines that no one could tell apart (a tester, 2026-12-05). The
entry's own log file keeps its lines as they were (one file per entry)."""

from __future__ import annotations

import logging
import threading

from triton_dist.tune import autotune

from .helpers import entries


def _key(n, **_):
    return (n,)


def _bench(fn, n_warmup, n_repeat):
    for _ in range(n_warmup):
        fn()
    return [float(fn()) for _ in range(n_repeat)]


@autotune(config_space=[{"c": c} for c in range(3)], key_fn=_key, n_warmup=1, n_repeat=2, do_bench=_bench)
def first(n, c):
    return 3 - c


@autotune(config_space=[{"c": c} for c in range(3)], key_fn=_key, n_warmup=1, n_repeat=2, do_bench=_bench)
def second(n, c):
    return 1 + c


def test_concurrent_tunings_lines_name_their_function(cache_dir, capsys):
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger("triton_dist.tune")
    handler, level = Keep(logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        threads = [threading.Thread(target=f, args=(5,), kwargs={"autotune_verbose": True})
                   for f in (first, second)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[triton_dist]")]
    for lines in (printed, records):
        for name in ("first", "second"):
            own = [line for line in lines if f"test_verbose_labels.{name}" in line]
            # the start, 3 configs, the best and the entry written: all of them name it
            assert len(own) == 6, lines
            assert sum("best config for key (5,)" in line for line in own) == 1, own
        assert len(lines) == 12, lines
    # the entry's file: its lines as before, without the name on each
    for path in entries(cache_dir, "first") + entries(cache_dir, "second"):
        text = path.with_suffix(".log").read_text()
        assert "config 2 {'c': 2}" in text and all(": config " not in line for line in text.splitlines()), text
