"""Every TRITON_DIST_* variable parsed strictly, with the variable's name in each error."""

from __future__ import annotations

from pathlib import Path

import pytest

from triton_dist import settings
from triton_dist.errors import SettingsError
from triton_dist.settings import ENV_VARS, get_settings, override

FLAGS = ["TRITON_DIST_AUTOTUNE_ALWAYS_TUNE", "TRITON_DIST_AUTOTUNE_VERSION_CHECK"]


@pytest.fixture
def clean_env(monkeypatch):
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_every_variable_is_documented_and_named_as_the_spec_says():
    assert set(ENV_VARS) >= {
        "TRITON_DIST_AUTOTUNE_DIR", "TRITON_DIST_DEVICE", "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE",
        "TRITON_DIST_AUTOTUNE_VERSION_CHECK", "TRITON_DIST_AUTOTUNE_CACHE_ONLY",
    }
    assert all(name.startswith("TRITON_DIST_") and text for name, text in ENV_VARS.items())


def test_defaults(clean_env):
    s = get_settings()
    assert s.autotune_dir == Path.home() / ".triton_dist" / "autotune"
    assert s.device is None
    assert s.always_tune is False and s.version_check is False
    assert s.cache_only == "off"
    assert s.agree_timeout_s > 0 and s.candidate_timeout_s is None


def test_cache_root_moves_and_expands_the_user(clean_env, tmp_path):
    clean_env.setenv("TRITON_DIST_AUTOTUNE_DIR", str(tmp_path / "x"))
    assert get_settings().autotune_dir == tmp_path / "x"
    clean_env.setenv("TRITON_DIST_AUTOTUNE_DIR", "~/somewhere")
    assert get_settings().autotune_dir == Path.home() / "somewhere"


TRUE_SPELLINGS = ["1", "true", "on", "yes", "True", "TRUE", "On", "YES", " 1 ", " true\t"]
FALSE_SPELLINGS = ["0", "false", "off", "no", "False", "OFF", "No", "", " 0 "]
FIELD = {"TRITON_DIST_AUTOTUNE_ALWAYS_TUNE": "always_tune", "TRITON_DIST_AUTOTUNE_VERSION_CHECK": "version_check"}


@pytest.mark.parametrize("name", FLAGS)
@pytest.mark.parametrize(("value", "expected"), [(v, True) for v in TRUE_SPELLINGS]
                         + [(v, False) for v in FALSE_SPELLINGS])
def test_flags_accept_every_boolean_spelling_in_any_case(clean_env, name, value, expected):
    # issue 18 item 4: upstream's TRITON_DIST_AUTOTUNE_VERSION_CHECK=true must not raise
    clean_env.setenv(name, value)
    assert getattr(get_settings(), FIELD[name]) is expected


@pytest.mark.parametrize("name", FLAGS)
@pytest.mark.parametrize("value", ["2", "-1", "enable", "y", "t", "truee", "1.0"])
def test_flags_refuse_anything_else_naming_the_variable_and_the_spellings(clean_env, name, value):
    clean_env.setenv(name, value)
    with pytest.raises(SettingsError, match=name) as info:
        get_settings()
    assert isinstance(info.value, ValueError)
    assert repr(value) in str(info.value)
    assert "true" in str(info.value) and "off" in str(info.value)


@pytest.mark.parametrize(("value", "expected"), [("cpu", "cpu"), ("CUDA", "cuda"), ("npu", "npu"), ("", None)])
def test_device_values(clean_env, value, expected):
    clean_env.setenv("TRITON_DIST_DEVICE", value)
    assert get_settings().device == expected


@pytest.mark.parametrize(("value", "expected"), [
    ("", "off"), ("0", "off"), ("1", "default"), ("strict", "strict"), ("STRICT", "strict"),
    ("true", "default"), ("Yes", "default"), ("on", "default"), ("false", "off"), ("NO", "off"), ("off", "off"),
])
def test_cache_only_values(clean_env, value, expected):
    clean_env.setenv("TRITON_DIST_AUTOTUNE_CACHE_ONLY", value)
    assert get_settings().cache_only == expected


@pytest.mark.parametrize(("name", "value"), [
    ("TRITON_DIST_DEVICE", "gpu"),
    ("TRITON_DIST_AUTOTUNE_CACHE_ONLY", "2"),
    ("TRITON_DIST_AUTOTUNE_CACHE_ONLY", "strictly"),
    ("TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S", "soon"),
    ("TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S", "-3"),
    ("TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S", "inf"),
    ("TRITON_DIST_AUTOTUNE_CANDIDATE_TIMEOUT_S", "0"),
])
def test_other_bad_values_name_their_variable(clean_env, name, value):
    clean_env.setenv(name, value)
    with pytest.raises(SettingsError, match=name):
        get_settings()


def test_settings_are_read_when_asked_not_at_import(clean_env):
    clean_env.setenv("TRITON_DIST_AUTOTUNE_ALWAYS_TUNE", "1")
    assert get_settings().always_tune is True
    clean_env.setenv("TRITON_DIST_AUTOTUNE_ALWAYS_TUNE", "0")
    assert get_settings().always_tune is False


def test_override_is_scoped_and_checks_names(clean_env, tmp_path):
    clean_env.setenv("TRITON_DIST_AUTOTUNE_DIR", str(tmp_path / "env"))
    with override(TRITON_DIST_AUTOTUNE_DIR=str(tmp_path / "over"), TRITON_DIST_AUTOTUNE_ALWAYS_TUNE="1"):
        assert get_settings().autotune_dir == tmp_path / "over"
        assert get_settings().always_tune is True
        with override(TRITON_DIST_AUTOTUNE_DIR=None):
            assert get_settings().autotune_dir == Path.home() / ".triton_dist" / "autotune"
    assert get_settings().autotune_dir == tmp_path / "env"
    assert settings._overrides == {}
    with pytest.raises(SettingsError, match="TRITON_DIST_NOPE"), override(TRITON_DIST_NOPE="1"):
        pass


@pytest.mark.parametrize(("value", "expected"), [("", 2), ("2", 2), (" 1 ", 1)])
def test_graph_placements_values(clean_env, value, expected):
    clean_env.setenv("TRITON_DIST_GRAPH_PLACEMENTS", value)
    assert get_settings().graph_placements == expected


@pytest.mark.parametrize("value", ["0", "3", "two", "1.5", "-1"])
def test_graph_placements_refuse_anything_but_one_or_two(clean_env, value):
    clean_env.setenv("TRITON_DIST_GRAPH_PLACEMENTS", value)
    with pytest.raises(SettingsError, match="TRITON_DIST_GRAPH_PLACEMENTS") as info:
        get_settings()
    assert repr(value) in str(info.value) and "give 1" in str(info.value) and "unset it" in str(info.value)


@pytest.mark.parametrize(("name", "value", "says", "never"), [
    # unset means on (README): the message said "or unset to disable" (a tester, 2026-12-04)
    ("TRITON_DIST_PREWARM", "maybe",
     ["0/false/off/no", "unset it, for the default: on, except under TRITON_INTERPRET=1"], ["unset to disable"]),
    # child processes, threads only where Triton lacks AsyncCompileMode (README): it said "compile threads"
    ("TRITON_DIST_COMPILE_WORKERS", "0", ["child processes (threads where Triton lacks AsyncCompileMode)",
                                          "divided among the node's ranks", "at most 32"], ["compile threads"]),
    ("TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S", "soon", ["unset it for the default, 300"], []),
    ("TRITON_DIST_AUTOTUNE_CANDIDATE_TIMEOUT_S", "0", ["unset it for no limit (the default)"], []),
    ("TRITON_DIST_AUTOTUNE_ALWAYS_TUNE", "2", ["unset to disable"], []),  # off by default: so it is
])
def test_a_bad_value_is_told_what_unset_does_as_the_readme_says(clean_env, name, value, says, never):
    clean_env.setenv(name, value)
    with pytest.raises(SettingsError) as info:
        get_settings()
    message = str(info.value)
    assert f"{name}={value!r}" in message
    assert all(text in message for text in says) and not any(text in message for text in never), message


def test_contradicting_settings_are_named_as_set(clean_env):
    clean_env.setenv("TRITON_DIST_AUTOTUNE_ALWAYS_TUNE", "yes")
    clean_env.setenv("TRITON_DIST_AUTOTUNE_CACHE_ONLY", "strict")
    with pytest.raises(SettingsError) as info:
        get_settings()
    assert "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE=yes and TRITON_DIST_AUTOTUNE_CACHE_ONLY=strict" in str(info.value)


def test_a_name_that_looks_like_a_setting_but_is_none_is_said_once(clean_env, tmp_path):
    """An operator's misspelt cache root (``TRITON_DIST_AUTOTUNE_CACHE_DIR``) was ignored without a
    word: every job of the cluster used its own ~/.triton_dist instead of the shared root; so was a
    misspelt cache-only switch, and production jobs tuned (2026-12-05)."""
    from triton_dist.errors import TritonDistWarning

    clean_env.setattr(settings, "_told", set())
    clean_env.setattr(settings, "_last", None)
    clean_env.setenv("TRITON_DIST_AUTOTUNE_CACHE_DIR", str(tmp_path / "shared"))
    clean_env.setenv("TRITON_DIST_CACHE_ONLY", "strict")
    for name in ("TRITON_DIST_LOG_LEVEL", "TRITON_DIST_TEST_LAYERS", "TRITON_DIST_HARDWARE_OVERRIDE"):
        clean_env.setenv(name, "")  # upstream's, the test script's, the digest's override: not warned
    with pytest.warns(TritonDistWarning) as said:
        assert get_settings().autotune_dir == Path.home() / ".triton_dist" / "autotune"  # ignored, as before
    texts = sorted(str(w.message) for w in said if issubclass(w.category, TritonDistWarning))
    assert len(texts) == 2, texts
    assert texts[0].startswith("TRITON_DIST_AUTOTUNE_CACHE_DIR is not a setting of this triton_dist and is "
                               "ignored: did you mean TRITON_DIST_AUTOTUNE_DIR?")
    assert texts[1].startswith("TRITON_DIST_CACHE_ONLY is not a setting of this triton_dist and is ignored: "
                               "did you mean TRITON_DIST_AUTOTUNE_CACHE_ONLY?")
    clean_env.setenv("TRITON_DIST_AUTOTUNE_ALWAYS_TUNE", "1")  # parsed again: not said again
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", TritonDistWarning)
        assert get_settings().always_tune is True
