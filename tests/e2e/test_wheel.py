"""The package as a user installs it (``pipx install``, ``uv tool install``): a wheel built from this
checkout has the demo project and the metadata in it, and ``refagent demo`` works from the installed copy.

The wheel is built from a copy of the package's own files (never the checkout itself, where a stale
``build/`` could leak into it) with the ``setuptools`` of this environment (the test extra has it), and
installed with ``pip install --target``: no network, no index. The dependencies stay this environment's,
and ``PYTHONPATH`` holds only the installed copy, so the checkout is not importable by the demo or the agent
it starts.
"""

from __future__ import annotations

import email
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import zipfile
from email.message import Message
from pathlib import Path

import pytest

from refagent.client.demo import COPY_IGNORES, PROJECT_DIR
from tests.support.helpers_process import ROOT

pytestmark = pytest.mark.slow

PACKAGE_FILES = ("pyproject.toml", "README.md", "LICENSE")
BUG = "if quantity > BULK_QUANTITY:"
FIX = "if quantity >= BULK_QUANTITY:"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in PACKAGE_FILES:
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "refagent", source / "refagent", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"))
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", out, source],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (found,) = out.glob("refagent-*-py3-none-any.whl")
    return found


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed into a directory of its own, console script included (``bin/refagent``)."""
    site = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-compile", "--target", site, wheel],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return site


def installed_env(site: Path, home: Path) -> dict[str, str]:
    """No model configured, no user config, and only the installed copy of refagent importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "REFAGENT_", "PYTHON"))}
    home.mkdir(parents=True, exist_ok=True)
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        PYTHONPATH=str(site),
        PYTHONDONTWRITEBYTECODE="1",
        REFAGENT_DEMO_PACE="0",
    )
    return env


def demo_project_files() -> set[str]:
    """The demo project's files in the checkout, as the demo copies them (no ruff.toml, no caches)."""
    project = ROOT / "refagent" / PROJECT_DIR
    files = set()
    for path in project.rglob("*"):
        parts = path.relative_to(project).parts
        if path.is_file() and not any(p.startswith(".") or fnmatch.filter([p], i) for p in parts for i in COPY_IGNORES):
            files.add("/".join(parts))
    return files


def metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(archive.read(name))


def test_the_wheel_ships_the_demo_project(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    prefix = f"refagent/{PROJECT_DIR}/"
    shipped = {n.removeprefix(prefix) for n in names if n.startswith(prefix)}
    expected = demo_project_files()
    assert {"README.md", "shop/pricing.py", "shop/cart.py", "tests/test_pricing.py"} <= expected
    assert shipped == expected  # a file added to the project needs its pattern in pyproject's package-data
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", "ruff.toml"))]
    assert {"refagent/py.typed", "refagent/prompts/system.md"} <= names
    # the demo project is data, never a package of the wheel
    assert not [n for n in names if n.startswith(("shop/", "tests/", "refagent/demo_project"))]


def test_the_wheel_has_its_metadata(wheel: Path) -> None:
    meta = metadata(wheel)
    assert meta["License-Expression"] == "Apache-2.0"
    classifiers = meta.get_all("Classifier") or []
    assert not [c for c in classifiers if c.startswith("License ::")]  # PEP 639: the expression says it
    assert {"Environment :: Console", "Typing :: Typed", "Programming Language :: Python :: 3.11"} <= set(classifiers)
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    repository = json.loads((ROOT / "registry" / "agent.json").read_text())["repository"]
    assert urls["Repository"] == repository  # one placeholder (REPLACE-ME) everywhere until it is published
    with zipfile.ZipFile(wheel) as archive:
        (entry_points,) = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
        assert "refagent = refagent.cli:main" in archive.read(entry_points).decode()
        assert [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]


def test_refagent_demo_fixes_the_bug_from_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    env = installed_env(installed, tmp_path / "home")
    where = subprocess.run(
        [sys.executable, "-c", "import refagent.client.demo as d; print(d.default_project())"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    packaged = Path(where.stdout.strip())
    assert packaged == (installed / "refagent" / PROJECT_DIR).resolve()
    assert BUG in (packaged / "shop" / "pricing.py").read_text()

    script = installed / "bin" / "refagent"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "refagent"]
    workdir = tmp_path / "work"
    result = subprocess.run(
        [*command, "demo", "--workdir", str(workdir)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    shown = result.stdout
    assert result.returncode == 0, shown + result.stderr
    assert "built-in SCRIPTED demo model" in shown
    assert "✓ The bug is fixed: the project's tests pass." in shown
    assert FIX in (workdir / PROJECT_DIR / "shop" / "pricing.py").read_text()
    assert BUG in (packaged / "shop" / "pricing.py").read_text()  # the installed copy keeps its bug
    assert not (workdir / PROJECT_DIR / "ruff.toml").exists()


def test_refagent_demo_help_from_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    script = installed / "bin" / "refagent"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "refagent"]
    env = installed_env(installed, tmp_path / "home")
    top = subprocess.run([*command, "--help"], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert "refagent demo" in top.stdout
    demo = subprocess.run([*command, "demo", "--help"], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert demo.stdout.startswith("usage: refagent demo")
