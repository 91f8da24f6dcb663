"""The public surface: names pinned, errors picklable, and importing changes nothing."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap

import pytest

import triton_dist
import triton_dist.errors as errors
import triton_dist.tune as tune


def test_package_exports_are_pinned():
    assert triton_dist.__all__ == ["AutoTuner", "ContextualAutoTuner", "__version__", "autotune",
                                   "contextual_autotune"]
    assert triton_dist.autotune is tune.autotune
    assert triton_dist.AutoTuner is tune.AutoTuner
    assert isinstance(triton_dist.__version__, str)
    with pytest.raises(AttributeError):
        triton_dist.no_such_name  # noqa: B018


def test_tune_exports_are_pinned():
    # load_autotune_data and pretty_triton_config_repr: upstream's names, which its tools import
    assert tune.__all__ == ["AutoTuner", "autotune", "load_autotune_data", "pretty_triton_config_repr", "to_hashable"]
    import inspect

    params = inspect.signature(tune.autotune).parameters
    assert list(params)[:3] == ["config_space", "key_fn", "prune_fn"]
    assert params["prune_fn"].default is None
    # the call controls (autotune, autotune_verbose, autotune_allow_arg_overwrite, autotune_pg)
    # are keywords of every call: test_tune_flow.py checks what each does


def test_errors_exports_are_sorted_and_one_hierarchy():
    assert errors.__all__ == sorted(errors.__all__)
    assert set(errors.__all__) >= {
        "CacheMissError", "ConfigSpaceError", "DeviceUnavailableError", "DuplicateArgumentError",
        "KeyFunctionError", "NoValidConfigError", "PruneError", "RankDisagreementError",
        "RankFailureError", "SettingsError", "TritonDistError", "TritonDistWarning", "TunerActiveError",
    }
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, (errors.TritonDistError, errors.TritonDistWarning)), name
    # the builtin bases users catch, as the seed and SPEC name them
    assert issubclass(errors.ConfigSpaceError, ValueError)
    assert issubclass(errors.DuplicateArgumentError, ValueError)
    assert issubclass(errors.KeyFunctionError, TypeError)
    assert issubclass(errors.NoValidConfigError, RuntimeError)
    assert issubclass(errors.SettingsError, ValueError)
    assert issubclass(errors.TritonDistWarning, UserWarning)


@pytest.mark.parametrize("name", [n for n in errors.__all__ if n != "TritonDistWarning"])
def test_every_error_survives_pickling(name):
    cls = getattr(errors, name)
    error = cls("what went wrong and how to fix it", key="(1, 2)", errors=["RuntimeError: x"])
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is cls
    assert str(copy) == str(error)
    assert copy.details == {"key": "(1, 2)", "errors": ["RuntimeError: x"]}


def test_a_raised_error_pickles_with_its_details():
    from .helpers import make_tuner

    tuned, _ = make_tuner(fail={0: RuntimeError("a"), 1: RuntimeError("b"), 2: RuntimeError("c")})
    with pytest.raises(errors.NoValidConfigError) as info:
        tuned(1)
    copy = pickle.loads(pickle.dumps(info.value))
    assert str(copy) == str(info.value) and copy.details == info.value.details


IMPORT_CHECK = textwrap.dedent('''
    import json, logging, os, sys
    import triton
    from triton.runtime.autotuner import Autotuner

    def handlers():
        loggers = [logging.getLogger()] + [logging.getLogger(n) for n in sorted(logging.root.manager.loggerDict)]
        return {lg.name: len(lg.handlers) for lg in loggers if isinstance(lg, logging.Logger)}

    def levels():
        return {n: lg.level for n, lg in logging.root.manager.loggerDict.items() if isinstance(lg, logging.Logger)}

    run, config_repr, env, before = Autotuner.run, triton.Config.__repr__, dict(os.environ), handlers()
    before_levels, root_level = levels(), logging.getLogger().level
    import triton_dist, triton_dist.tune, triton_dist.autotuner
    after = handlers()
    print(json.dumps({
        "run_unchanged": Autotuner.run is run,
        "config_repr_unchanged": triton.Config.__repr__ is config_repr,
        "env_unchanged": dict(os.environ) == env,
        "new_handlers": {n: c for n, c in after.items() if c != before.get(n, 0)},
        "levels_changed": {n: l for n, l in levels().items() if n in before_levels and before_levels[n] != l},
        "root_level_unchanged": logging.getLogger().level == root_level,
        "ours_have_no_handlers": all(not logging.getLogger(n).handlers for n in logging.root.manager.loggerDict
                                     if n.startswith("triton_dist")),
    }))
''')


@pytest.mark.timeout(60)
def test_importing_the_package_changes_nothing_in_triton_logging_or_the_environment():
    done = subprocess.run([sys.executable, "-c", IMPORT_CHECK], capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {
        "run_unchanged": True, "config_repr_unchanged": True, "env_unchanged": True,
        "new_handlers": {}, "levels_changed": {}, "root_level_unchanged": True,
        "ours_have_no_handlers": True,
    }
