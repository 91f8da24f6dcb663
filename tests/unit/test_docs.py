"""The user-facing docs say what the code does (issue 18 items 5, 7, 12): how to reach the
installed tools, the console scripts, every campaign field with its real default, and what
contextual tuning honours of the inner ``@triton.autotune``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ray_runner import spec

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
CAMPAIGNS = (REPO / "docs" / "campaigns.md").read_text()
ARCHITECTURE = (REPO / "docs" / "architecture.md").read_text()
BIN = Path(sys.executable).parent


def test_right_under_the_two_commands_the_readme_says_how_to_reach_the_tools():
    blocks = re.findall(r"```bash\n(.*?)```", README, re.S)
    assert "scripts/demo.sh" in blocks[0] and "scripts/test.sh" in blocks[0]
    after = README.split(blocks[0], 1)[1][:1200]  # the text right below the two commands
    assert "source .venv/bin/activate" in after and "No module named 'filelock'" in after
    tools = set(re.findall(r"\.venv/bin/([\w-]+)", after))
    assert {"python", "ray", "ray-runner", "triton-dist-cache"} <= tools
    if sys.prefix != sys.base_prefix:  # run from the venv the README describes: the paths exist
        for tool in tools:
            assert (BIN / tool).exists(), tool


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="needs the project's venv")
def test_the_readme_tool_commands_run_from_the_repository_root(tmp_path):
    (tmp_path / "cache").mkdir()
    for argv in ([str(BIN / "ray-runner"), "validate", "examples/campaigns/cpu.yaml"],
                 [str(BIN / "triton-dist-cache"), "--dir", str(tmp_path / "cache"), "ls"]):
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (argv, done.stderr[-2000:])


def test_console_scripts_are_declared_and_in_the_readme():
    section = (REPO / "pyproject.toml").read_text().split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    scripts = dict(re.findall(r'^([\w-]+) = "([^"]+)"$', section, re.M))  # tomllib is 3.11+
    assert scripts == {"triton-dist-cache": "triton_dist.cli:main", "ray-runner": "ray_runner.__main__:main"}
    for name in scripts:
        assert f"`{name}`" in README or f"{name} " in README, name


def _rows(table_title: str) -> dict[str, list[str]]:
    section = CAMPAIGNS.split(table_title, 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells
    return rows


@pytest.mark.parametrize(("title", "model"), [
    ("## Campaign fields", spec.Campaign),
    ("## Target fields", spec.TargetSpec),
])
def test_campaigns_md_documents_exactly_the_models_fields_with_their_defaults(title, model):
    """The tables are written by hand for readers; the model is the one source: same fields, and
    each table's default is the model's (a required field says "required")."""
    rows = _rows(title)
    assert list(rows) == list(model.model_fields)  # the same fields, in the model's order
    for name, field in model.model_fields.items():
        cells, default = rows[name], field.get_default(call_default_factory=True)
        if field.is_required():
            assert cells[1] == "required", name
        elif isinstance(default, bool):
            assert f"`{str(default).lower()}`" in cells[1], name
        elif isinstance(default, (int, float, str)):
            assert f"`{default:g}`" in cells[1] if isinstance(default, float) else f"`{default}`" in cells[1], name
        else:  # None, empty: the table says what applies instead
            assert default in (None, (), {}) and cells[1] != "required", name
        assert len(cells[2]) > 30, name  # says what it is
        assert field.description and len(field.description) > 30, f"{model.__name__}.{name} has no description"


def test_campaigns_md_example_is_a_valid_campaign():
    example = re.findall(r"```yaml\n(.*?)```", CAMPAIGNS, re.S)[0]
    campaign = spec.parse_campaign(yaml.safe_load(example))
    used = set(yaml.safe_load(example)) | set(yaml.safe_load(example)["targets"][0])
    assert used == set(spec.Campaign.model_fields) | set(spec.TargetSpec.model_fields)  # every field
    assert len(campaign.cases()) == 1 + 4


@pytest.mark.parametrize("text", [README, ARCHITECTURE])
def test_contextual_options_honoured_or_not_are_documented(text):
    for option in ("do_bench", "knobs.autotuning.print", "listener", "bench_time", "warmup", "rep",
                   "use_cuda_graph", "cache_results", ".autotune_logs"):
        assert option in text, option
