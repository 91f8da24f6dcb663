"""Campaign files and image recipes under deploy/: the format the CLI validates, targets that
exist in the repository, pinned versions, the project installed with its [ray] extra, no secrets.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from deploy_lib import (
    CAMPAIGN_TARGET_KEYS,
    CAMPAIGN_TOP_KEYS,
    IMAGES,
    REPO,
    SECRET_NAME,
    campaign_files,
    cluster_specs,
    containers,
    device_of_pod,
    dockerfile_args,
    docs,
    pod_specs,
    rel,
    split_import,
)

# ---------------------------------------------------------------- campaign files



@pytest.mark.parametrize("path", campaign_files(), ids=rel)
def test_campaign_format(path: Path):
    c = yaml.safe_load(path.read_text())
    assert set(c) <= CAMPAIGN_TOP_KEYS, f"unknown fields {sorted(set(c) - CAMPAIGN_TOP_KEYS)}"
    assert c.get("device") in {"auto", "npu", "cuda", "cpu"}
    assert isinstance(c.get("retries"), int) and c["retries"] >= 0
    assert isinstance(c.get("case_timeout_s"), (int, float)) and c["case_timeout_s"] > 0
    assert c.get("targets"), "targets is required"
    for i, t in enumerate(c["targets"]):
        assert set(t) <= CAMPAIGN_TARGET_KEYS, f"targets[{i}]: unknown {sorted(set(t) - CAMPAIGN_TARGET_KEYS)}"
        split_import(t["function"])
        split_import(t["args"])
        assert isinstance(t.get("world_size"), int) and t["world_size"] >= 1, f"targets[{i}].world_size"
        assert t.get("cases") or t.get("grid"), f"targets[{i}]: needs cases or grid"


@pytest.mark.parametrize("path", campaign_files(), ids=rel)
def test_campaign_targets_exist_in_the_repo(path: Path):
    """function/args point at top-level names of modules in this repository (no import needed)."""
    for t in yaml.safe_load(path.read_text())["targets"]:
        for value in (t["function"], t["args"]):
            module, attr = split_import(value)
            base = REPO.joinpath(*module.split("."))
            source = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
            assert source.is_file(), f"{value}: no module {module} in the repository ({rel(base)}.py)"
            tree = ast.parse(source.read_text())
            names = set()
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    for tgt in node.targets if isinstance(node, ast.Assign) else [node.target]:
                        names |= {n.id for n in ast.walk(tgt) if isinstance(n, ast.Name)}
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    names |= {(a.asname or a.name).split(".")[0] for a in node.names}
            assert attr in names, f"{value}: {rel(source)} defines no top-level {attr}"


@pytest.mark.parametrize("path", campaign_files(), ids=rel)
def test_campaign_validates_with_the_cli(path: Path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, "-m", "ray_runner", "validate", str(path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"ray_runner validate {rel(path)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


# ---------------------------------------------------------------- images



@pytest.mark.parametrize("name", ["Dockerfile.ascend", "Dockerfile.cuda"])
def test_dockerfile_pins_versions_and_installs_the_project(name: str):
    path = IMAGES / name
    text, args = path.read_text(), dockerfile_args(path)
    for arg, value in args.items():
        if arg.endswith(("_VERSION", "_TAG")):
            assert value and value != "latest", f"{name}: ARG {arg} must have a pinned default"
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    copied = re.search(r"^COPY \. (\S+)", code, re.M)
    assert copied, f"{name}: copy the repository into the build"
    extras = "ray,npu" if name == "Dockerfile.ascend" else "ray"
    assert re.search(rf"pip install (?:--\S+ \S+ )*\"?{re.escape(copied.group(1))}/?\[{extras}\]", code), (
        f"{name}: install the copied project with its [{extras}] extra"
    )
    assert "ray[default]==${RAY_VERSION}" in text
    for line in re.findall(r"^(?:ARG|ENV)\s+(.*)$", text, re.M):
        assert not SECRET_NAME.search(line.split("=")[0]), f"{name}: secret-like ARG/ENV {line!r}"
    if name == "Dockerfile.ascend":
        for arg in ("CANN_TAG", "TORCH_NPU_VERSION", "TRITON_ASCEND_VERSION"):
            assert arg in args, f"{name}: ARG {arg} missing"
        assert "torch-npu==${TORCH_NPU_VERSION}" in text and "triton-ascend==${TRITON_ASCEND_VERSION}" in text
    else:
        assert "triton==${TRITON_VERSION}" in text


def test_npu_extra_names_what_the_ascend_image_and_the_ascend_layer_install():
    """pyproject's npu extra == the Ascend image's pins == what tests/ascend runs and fakes."""
    import tomllib

    root = IMAGES.parents[1]
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["npu"]
    pins = dict(req.split("==") for req in extra if "==" in req)
    assert set(pins) == {"torch-npu", "triton-ascend"}, f"npu extra must pin both: {extra}"
    # triton-ascend 3.2.0 imports pybind11 at start-up without declaring it (session 28: an image
    # without it built, then every NPU compile failed)
    assert any(req.startswith("pybind11>=") for req in extra), f"npu extra must bring pybind11: {extra}"
    args = dockerfile_args(IMAGES / "Dockerfile.ascend")
    assert pins["torch-npu"] == args["TORCH_NPU_VERSION"] and pins["triton-ascend"] == args["TRITON_ASCEND_VERSION"]
    assert pins["torch-npu"].startswith(args["TORCH_VERSION"]), "torch_npu X.Y.Z[.postN] goes with torch X.Y.Z"
    layer = (root / "requirements" / "ascend.txt").read_text()
    assert f"triton-ascend=={pins['triton-ascend']}" in layer.split()
    standin = (root / "tests" / "ascend" / "standin" / "torch_npu" / "__init__.py").read_text()
    assert f'__version__ = "{pins["torch-npu"]}"' in standin


def test_ray_versions_agree():
    """Manifests' rayVersion == the Ray pinned in both images (KubeRay picks commands by it)."""
    versions = {dockerfile_args(IMAGES / n)["RAY_VERSION"] for n in ("Dockerfile.ascend", "Dockerfile.cuda")}
    assert len(versions) == 1, f"images pin different Ray versions: {versions}"
    for path, spec in cluster_specs():
        assert spec["rayVersion"] in versions, f"{rel(path)}: rayVersion {spec['rayVersion']} != image {versions}"


def test_images_match_device_of_manifest():
    for path, doc in docs():
        for _, pod in pod_specs(doc):
            device = device_of_pod(pod)
            if device is None:
                device = next((device_of_pod(p) for _, p in pod_specs(doc) if device_of_pod(p)), None)
            suffix = {"npu": "-ascend", "cuda": "-cuda"}.get(device)
            for c in containers(pod):
                if suffix:
                    assert c["image"].endswith(suffix), f"{rel(path)}: {c['name']} runs {c['image']} on {device}"
