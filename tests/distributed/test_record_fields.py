"""The records of a multi-rank job carry the rank, the job's size, the function and the key as
fields (``extra``) a JSON log formatter reads (a tester, 2026-12-05: they were only in the
text, ``[rank R/N] F: ...``); README "What it prints and logs" names them."""

from __future__ import annotations

import pytest
import verbose_workers
from harness import run_ranks

pytestmark = pytest.mark.timeout(180)


def test_records_carry_rank_function_and_key_as_fields(tmp_path):
    results = run_ranks(verbose_workers.record_fields, 2, tmp=tmp_path,
                        rank_env={r: {"TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / f"cache{r}")} for r in range(2)},
                        env={"TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S": "30"})
    assert all("ok" in r for r in results), results
    for rank, said in enumerate(r["ok"] for r in results):
        infos = [r for r in said if r[0] == "INFO" and "for key (9,)" in r[1]]
        # each tuning's start and result: the rank's own, then the grouped one (the group's rank)
        assert [r[2:] for r in infos] == [[rank, 2, f"verbose_workers.{name}", "(9,)"]
                                          for name in ("alone", "alone", "said", "said")], said
        assert [r[1].split("] ", 1)[1].split(" for key")[0] for r in infos] == [
            "tuning verbose_workers.alone", "verbose_workers.alone: best config",
            "tuning verbose_workers.said", "verbose_workers.said: best config"], said
        warned = [r for r in said if r[0] == "WARNING" and "tunes in this process alone" in r[1]]
        assert len(warned) == 1 and warned[0][1].startswith(f"[rank {rank}/2] "), said
        # the warning names the function (a tuner alone in a job: no key yet), U41
        assert warned[0][2:] == [rank, 2, "verbose_workers.alone", None], warned


def test_the_contextual_records_carry_them_too(tmp_path):
    results = run_ranks(verbose_workers.contextual_info, 2, args=(str(tmp_path),), tmp=tmp_path)
    assert all("ok" in r for r in results), results
    for rank, said in enumerate(r["ok"] for r in results):
        announced, choice = said["fields"]
        assert " logs to " in announced[0] and "->" in choice[0], said
        assert announced[1:3] == [rank, 2] and announced[3].endswith("contextual_info.<locals>.outer"), said
        assert announced[4] is None, said
        # the choice: the outer function, and the kernel's key as its text says it
        assert choice[1:4] == [rank, 2, announced[3]] and f" key {choice[4]} -> " in choice[0], said
