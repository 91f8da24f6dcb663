"""What ``autotune_verbose=True`` says (issue 18 item 11): a hit once per key with where it came
from, and why a config that is not the fastest measured was chosen."""

from __future__ import annotations

from tests.served import pack_files
from triton_dist._store import packfile, packs
from triton_dist.tune import autotune

from .helpers import entries, make_tuner

TIMES = {0: 3.0, 1: 1.0, 2: 2.0}


def _said(capsys):
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("[triton_dist]")]


def test_a_disk_hit_says_so_once_with_the_entry_path(cache_dir, capsys):
    first, _ = make_tuner(times=TIMES)
    first(4)
    (path,) = entries(cache_dir)
    capsys.readouterr()

    second, probe = make_tuner(times=TIMES)
    second(4, autotune_verbose=True)
    (line,) = _said(capsys)
    assert "cache hit for key ('x', 4)" in line and "config 1 {'c': 1}" in line and str(path) in line
    second(4, autotune_verbose=True)  # now an in-memory hit of the same key: already said
    assert _said(capsys) == []
    assert probe.benches == 0


def test_a_hit_served_from_a_pack_names_the_packed_entry_not_a_missing_file(cache_dir, capsys):
    # a seeded node holds packs, no loose files: the hit named <function>/<id>.json, which does
    # not exist (a tester, 2026-12-04); it names the packed entry as `ls`/`show` do
    first, _ = make_tuner(times=TIMES)
    first(4)
    (path,) = entries(cache_dir)
    packs.install(cache_dir, "host", packfile.build([(path.stem, path.read_bytes())]))
    path.unlink()
    (pack,) = pack_files(cache_dir, "host")
    capsys.readouterr()

    second, probe = make_tuner(times=TIMES)
    second(4, autotune_verbose=True)
    (line,) = _said(capsys)
    assert f"from {pack / path.name} (a packed entry" in line and probe.benches == 0
    second(5)  # another key, tuned: then the in-memory hit of 4 says where it came from too
    capsys.readouterr()
    second.tuner._told.clear()
    second(4, autotune_verbose=True)
    (line,) = _said(capsys)
    assert f"loaded from the cache entry {pack / path.name}" in line


def test_an_in_memory_hit_says_so_once_per_key_and_where_it_came_from(cache_dir, capsys):
    tuned, _ = make_tuner(times=TIMES)
    tuned(4, autotune_verbose=True)
    tuning = _said(capsys)
    assert any("tuning" in line for line in tuning) and any("best config" in line for line in tuning)
    (path,) = entries(cache_dir)

    tuned(4, autotune_verbose=True)
    (line,) = _said(capsys)
    assert "in-memory hit for key ('x', 4): config 1 {'c': 1}" in line
    assert f"tuned in this process, entry {path}" in line
    tuned(4, autotune_verbose=True)
    tuned(4)
    assert _said(capsys) == []  # once per key, and nothing without verbose
    tuned(5)
    tuned(5, autotune_verbose=True)
    (line,) = _said(capsys)
    assert "in-memory hit for key ('x', 5)" in line
    tuned.clear()


def test_quiet_calls_say_nothing(cache_dir, capsys):
    tuned, _ = make_tuner(times=TIMES)
    tuned(4)
    tuned(4)
    assert capsys.readouterr().out == ""


def _noisy_bench(means):
    """Per-run times alternating +-0.02 ms around each config's mean: a standard error of ~0.007 ms."""
    def bench(fn, n_warmup, n_repeat):
        mean = means[fn()]
        return [mean + (0.02 if i % 2 else -0.02) for i in range(n_repeat)]
    return bench


def test_a_runner_up_within_noise_is_named(cache_dir, capsys):
    # config 1 is measured 1% faster than config 0: the lowest mean wins (whatever its place in
    # config_space), and the line names config 0 as within the noise of it
    @autotune([{"c": 0}, {"c": 1}, {"c": 2}], key_fn=lambda n: (n,), do_bench=_noisy_bench({0: 1.01, 1: 1.00, 2: 2.0}))
    def host(n, c):
        return c

    assert host(1, autotune_verbose=True) == 1
    (best,) = [line for line in _said(capsys) if "best config" in line]
    assert "best config for key (1,): 1" in best
    assert "config 0 measured 1.0100 ms, within the noise of it" in best
    assert "a tuning again may choose either" in best


def test_a_clear_winner_gives_no_reason(cache_dir, capsys):
    @autotune([{"c": 0}, {"c": 1}], key_fn=lambda n: (n,), do_bench=_noisy_bench({0: 1.5, 1: 1.0}))
    def host(n, c):
        return c

    assert host(1, autotune_verbose=True) == 1
    (best,) = [line for line in _said(capsys) if "best config" in line]
    assert "within noise" not in best
