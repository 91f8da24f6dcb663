"""A warning's logged copy names the function and key it is about, as the INFO lines of a tuning
do (``extra``: ``function``, ``key``): a handler that keeps one function's records saw the
warnings of ~20 callers with both None (a tester, 2026-12-06), and the "nothing was saved" and
"configs raised and were left out" warnings had no logged copy at all. Real tunings, a real
logging handler on the ``triton_dist`` logger."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator

import pytest
import torch
import triton
import triton.language as tl

from triton_dist.autotuner import contextual_autotune
from triton_dist.errors import TritonDistWarning
from triton_dist.tune import autotune


class Kept(logging.Handler):
    """The records of one function, as a user's handler filtering by ``function`` keeps them."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def of(self, function: str, level: int = logging.WARNING) -> list[logging.LogRecord]:
        return [r for r in self.records if getattr(r, "function", None) == function and r.levelno == level]

    def info_keys(self, function: str) -> set[str]:
        """The keys the function's INFO tuning lines carry."""
        return {r.key for r in self.of(function, logging.INFO)}


@pytest.fixture
def kept() -> Iterator[Kept]:
    handler, logger = Kept(), logging.getLogger("triton_dist")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always", TritonDistWarning)
            yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _work(n, c):
    return sum(range(n * (c + 1)))


def test_a_tuning_that_could_not_save_logs_its_warning_with_function_and_key(kept, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(blocker / "cache"))  # cannot be created
    work = autotune([{"c": 0}, {"c": 1}], lambda n: ("n", n), n_warmup=0, n_repeat=1)(_work)
    work(7)
    (record,) = [r for r in kept.of(work.target.qualname) if "nothing was saved" in r.getMessage()]
    assert record.key == "('n', 7)" and kept.info_keys(work.target.qualname) == {record.key}


def test_a_cache_only_miss_and_a_check_with_nothing_to_compare_name_function_and_key(kept, monkeypatch):
    def fill(n, c, out=None):
        return None  # nothing returned, nothing written: check_correctness compares nothing

    tuned = autotune([{"c": 0}, {"c": 1}], lambda n, out=None: ("n", n), n_warmup=0, n_repeat=1,
                     check_correctness=True, restore_inplace=False)(fill)
    tuned(3)
    checked = [r for r in kept.of(tuned.target.qualname) if "has nothing to compare" in r.getMessage()]
    assert [r.key for r in checked] == ["('n', 3)"]  # (RunGuard's warning)

    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_ONLY", "1")
    tuned(4)
    (missed,) = [r for r in kept.of(tuned.target.qualname) if "no cache entry" in r.getMessage()]
    assert missed.key == "('n', 4)"


@triton.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, 2.0 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


def test_a_contextual_config_that_raised_logs_its_warning_with_function_and_key(kept):
    def pre(nargs):
        if nargs["BLOCK"] == 128:
            raise ValueError("workspace too small for BLOCK=128")

    scale = triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=pre) for b in (64, 128)],
                            key=["n"])(_scale)

    @contextual_autotune(n_repeat=1, n_warmup=0)
    def outer(x):
        y = torch.empty_like(x)
        scale[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, y, x.numel())
        return y

    x = torch.randn(300)
    torch.testing.assert_close(outer(x), 2.0 * x)
    (record,) = [r for r in kept.of(outer.__qualname__) if "raised and were left out" in r.getMessage()]
    assert "300" in record.key and kept.info_keys(outer.__qualname__) == {record.key}
    assert "ValueError: workspace too small for BLOCK=128" in record.getMessage()


def test_contextual_side_effect_warning_logs_its_function(kept):
    """The warning that a run thrown away stepped an optimizer (contextual run state)."""
    scale = triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (64, 128)], key=["n"])(_scale)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    @contextual_autotune(n_repeat=1, n_warmup=0)
    def step(x):
        y = torch.empty_like(x)
        scale[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, y, x.numel())
        model(y.reshape(-1, 4)).sum().backward()
        opt.step()
        return y

    step(torch.randn(300))
    (record,) = [r for r in kept.of(step.__qualname__) if "thrown away" in r.getMessage()]
    assert "SGD.step() ran" in record.getMessage()
