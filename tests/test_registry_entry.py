"""``registry/agent.json``, refagent's entry for the ACP agent registry, follows the registry's rules.

The rules are those of https://github.com/agentclientprotocol/registry: its JSON schema (vendored in
``tests/data/registry/``, see ``SOURCE.md`` there) and the checks its CI runs besides the schema
(``.github/workflows/build_registry.py``, listed in ``CONTRIBUTING.md`` under "Validation"): id format,
numeric ``x.y.z`` version, distribution structure, versions pinned to the entry's version, no ``latest``,
and a 16x16 monochrome ``currentColor`` icon. Checks that need the network (the package exists on PyPI,
the agent answers ``initialize`` with an ``agent`` or ``terminal`` auth method) are not run here.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

import refagent

ROOT = Path(__file__).parents[1]
ENTRY_PATH = ROOT / "registry" / "agent.json"
SCHEMA_PATH = Path(__file__).parent / "data" / "registry" / "agent.schema.json"

ID_PATTERN = re.compile(r"^[a-z][a-z0-9-]*$")  # the schema's pattern, and build_registry.py's checks
# https://semver.org's regular expression; the registry itself asks for numeric x.y.z (the schema's
# pattern is not anchored at the end, build_registry.py checks the first three parts are digits).
SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
DISTRIBUTION_TYPES = {"binary", "npx", "uvx"}
PLATFORMS = {"darwin-aarch64", "darwin-x86_64", "linux-aarch64", "linux-x86_64", "windows-aarch64", "windows-x86_64"}
OS_FAMILIES = {"darwin", "linux", "windows"}
ICON_COLOURS = {"currentcolor", "none", "inherit"}
PLACEHOLDER = "REPLACE-ME"


def load_entry() -> dict[str, Any]:
    entry: dict[str, Any] = json.loads(ENTRY_PATH.read_text(encoding="utf-8"))
    return entry


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def schema_errors(entry: Any) -> list[str]:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    validator = jsonschema_rs.validator_for(schema, validate_formats=True)
    return [f"{e.message} at /{'/'.join(map(str, e.instance_path))}" for e in validator.iter_errors(entry)]


def rule_errors(entry: dict[str, Any]) -> list[str]:
    """The registry CI's checks that the schema does not make (build_registry.py), as stated there.

    One is this project's own: ``authors`` must be a non-empty list (the registry makes it optional).
    """
    errors = []
    entry_id = entry.get("id")
    if not isinstance(entry_id, str) or not ID_PATTERN.match(entry_id):
        errors.append(f"id {entry_id!r}: lowercase letters, digits and hyphens, starting with a letter")
    version = entry.get("version")
    if not isinstance(version, str) or not SEMVER.match(version):
        errors.append(f"version {version!r} is not a semantic version x.y.z")
    authors = entry.get("authors")
    if not isinstance(authors, list) or not authors or not all(isinstance(a, str) and a.strip() for a in authors):
        errors.append(f"authors {authors!r}: a non-empty list of names")
    distribution = entry.get("distribution")
    if not isinstance(distribution, dict) or not distribution:
        return [*errors, "distribution: at least one of binary, npx, uvx"]
    if unknown := set(distribution) - DISTRIBUTION_TYPES:
        errors.append(f"unknown distribution types {sorted(unknown)}")
    binary = distribution.get("binary")
    if binary is not None:
        if missing := OS_FAMILIES - {p.split("-")[0] for p in binary if p in PLATFORMS}:
            errors.append(f"binary distribution misses operating systems {sorted(missing)}")
        for platform, target in binary.items():
            url = target.get("archive", "")
            if "/latest/" in url:
                errors.append(f"binary archive for {platform} uses /latest/")
            found = re.search(r"/(?:download|releases)/v?([\d.]+)/", url)
            if found and ".".join([*found.group(1).split("."), "0", "0"][:3]) != version:
                errors.append(f"binary archive for {platform} is version {found.group(1)}, not {version}")
    for kind in ("npx", "uvx"):
        package = distribution.get(kind, {}).get("package")
        if kind in distribution and not package:
            errors.append(f"{kind} distribution without a package")
        if package and "@latest" in package.lower():
            errors.append(f"{kind} package {package!r} uses @latest")
    # How the registry reads the version a package is pinned to: npm's name@version (a scope's @ apart),
    # and for uvx the digits after the first = or @ (name@version, name==version).
    npx = distribution.get("npx", {}).get("package") or ""
    npx_pinned = re.search(r"^@?[^@]+@(.+)$", npx)
    if npx_pinned and npx_pinned.group(1) != version:
        errors.append(f"npx package {npx!r} is not version {version}")
    uvx = distribution.get("uvx", {}).get("package") or ""
    uvx_pinned = re.search(r"[=@]+([\d.]+)", uvx)
    if uvx_pinned and uvx_pinned.group(1) != version:
        errors.append(f"uvx package {uvx!r} is not version {version}")
    return errors


def test_entry_matches_the_registry_schema() -> None:
    assert schema_errors(load_entry()) == []


def test_entry_follows_the_registry_rules_the_schema_leaves_out() -> None:
    assert rule_errors(load_entry()) == []


def test_entry_describes_this_package() -> None:
    entry = load_entry()
    project = pyproject()["project"]
    assert entry["id"] == "refagent"
    assert entry["version"] == refagent.__version__
    assert entry["description"] == project["description"]
    assert entry["license"] == project["license"] == "Apache-2.0"
    assert isinstance(entry["authors"], list)
    assert entry["authors"]
    assert all(isinstance(author, str) and author.strip() for author in entry["authors"])


def test_uvx_runs_the_pinned_package_serving_acp_on_stdio() -> None:
    """``uvx refagent@X.Y.Z`` runs the ``refagent`` command of that release, which serves ACP without args."""
    uvx = load_entry()["distribution"]["uvx"]
    project = pyproject()["project"]
    assert uvx["package"] == f"{project['name']}@{refagent.__version__}"
    # uvx runs the command named after the package (the registry gives it no --from).
    assert project["scripts"][project["name"]] == "refagent.cli:main"
    assert uvx.get("args", []) == []
    assert "env" not in uvx


def test_icon_is_16x16_and_monochrome() -> None:
    entry = load_entry()
    icon = ENTRY_PATH.parent / "icon.svg"
    assert entry.get("icon") == "./icon.svg"
    svg = icon.read_text(encoding="utf-8")
    width = re.search(r"<svg[^>]*\swidth=[\"'](\d+)", svg)
    height = re.search(r"<svg[^>]*\sheight=[\"'](\d+)", svg)
    assert width
    assert height
    assert (width.group(1), height.group(1)) == ("16", "16")
    colours = re.findall(r"\b(?:fill|stroke)\s*[=:]\s*[\"']?([^\"';]+)", svg, re.IGNORECASE)
    assert colours
    assert {c.strip().lower() for c in colours} <= ICON_COLOURS
    assert "currentcolor" in svg.lower()


def test_repository_is_a_real_url() -> None:
    repository = load_entry()["repository"]
    if PLACEHOLDER in repository:
        pytest.xfail(f"registry/agent.json: replace the placeholder repository URL {repository}")
    assert re.match(r"^https://[^\s/]+/\S+$", repository)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"id": "RefAgent"}, "id"),
        ({"id": "1refagent"}, "id"),
        ({"version": "0.1"}, "version"),
        ({"version": "v0.1.0"}, "version"),
        ({"authors": "refagent contributors"}, "authors"),
        ({"authors": []}, "authors"),
        ({"distribution": {}}, "distribution"),
        ({"distribution": {"pip": {"package": "refagent"}}}, "distribution"),
        ({"distribution": {"uvx": {"args": []}}}, "package"),
        ({"distribution": {"uvx": {"package": "refagent@latest"}}}, "latest"),
        ({"distribution": {"uvx": {"package": "refagent==9.9.9"}}}, "version"),
        ({"distribution": {"npx": {"package": "@scope/refagent@9.9.9"}}}, "version"),
        ({"distribution": {"binary": {"linux-x86_64": {"archive": "https://x.test/a.tgz", "cmd": "a"}}}}, "binary"),
    ],
)
def test_the_checks_reject_broken_entries(change: dict[str, Any], expected: str) -> None:
    """Each broken entry is refused, by the registry's rules (empty ``authors`` only by this project's)."""
    entry = {**load_entry(), **change}
    errors = schema_errors(entry) or rule_errors(entry)
    assert errors
    assert any(expected in error for error in errors), errors
