""" "Always allow" for a command cannot be turned into arbitrary execution (issue 12).

Each attack is a pair: a benign command the user allowed for good, and a hostile one that shares its
leading words. The hostile one must get another key, so the session asks again. Benign variants of an
allowed command must share its key where the table lets them. The table itself is checked too: no two
entries can give one key, and no wrapper or destructive program is in it.
"""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path
from typing import Any

import pytest

from refagent.acp.client import PermissionAnswer
from refagent.acp.types import PermissionOption
from refagent.tools.base import Plan
from refagent.tools.command_scope import (
    DESTRUCTIVE,
    MAX_SCOPED_CHARS,
    NAME,
    PYTHON,
    SCOPED_COMMANDS,
    WRAPPERS,
    _matches,
    permission_scope,
)
from refagent.tools.permissions import ALLOW_ALWAYS, Permissions
from refagent.tools.shell import RunCommand
from tests.support.tool_fakes import make_ctx

pytestmark = pytest.mark.anyio

ATTACKS = [
    # the three from the issue
    ("git grep -n x", "git grep --open-files-in-pager='touch X;:' x"),
    ("sed -n 1p README.md", "sed -n '1e touch X' README.md"),
    ("git diff --stat", "git diff --output=/tmp/outside/file"),
    # git: options that run a program, write a file, or change the repository
    ("git grep -n x", "git grep --open-files-in-pager=vi x"),
    ("git grep -n x", "git grep -Ovi x"),
    ("git grep -n x", "git grep -nO x"),
    ("git grep -n x", "git grep -f /etc/passwd README.md"),
    ("git diff --stat", "git diff --output /tmp/outside/file"),
    ("git diff --stat", "git diff --outp=/tmp/x"),  # git takes unique abbreviations
    ("git diff --stat", "git diff --ext-diff"),
    ("git diff --stat", "git diff --textconv README.md"),
    ("git diff --stat", "git diff --no-index /etc/passwd README.md"),
    ("git diff --stat", "git diff HEAD -- ../outside"),
    ("git log --oneline", "git log --output=x"),
    ("git log --oneline", "git log --show-signature"),
    ("git log --oneline", "git log --format=%GS"),  # %G placeholders run gpg
    ("git log --oneline", "git log --pretty=format:%GK"),
    ("git show HEAD", "git show HEAD --output=x"),
    ("git blame README.md", "git blame --contents /etc/passwd README.md"),
    ("git status", "git -c core.pager=sh status"),
    ("git status", "git -c core.fsmonitor=touch status"),
    ("git status", "git --config-env=core.pager=X status"),
    ("git status", "git --exec-path=/tmp status"),
    ("git status", "git -C /tmp status"),
    ("git status", "git status -- --output=x"),
    ("git status", "git push"),
    ("git status", "git fetch --upload-pack=touch origin"),
    ("git branch -a", "git branch -D main"),
    ("git branch -a", "git branch evil"),
    ("git remote -v", "git remote add evil x"),
    # sed: scripts and options that execute or write
    ("sed -n 1p README.md", "sed -n 1e README.md"),
    ("sed -n 1p README.md", "sed -n 1wout README.md"),
    ("sed -n 1p README.md", "sed -n s/a/b/e README.md"),
    ("sed -n 1p README.md", "sed -e 1p README.md"),
    ("sed -n 1p README.md", "sed -f script.sed README.md"),
    ("sed -n 1p README.md", "sed -i 1d README.md"),
    # find and other programs that destroy
    ("ls -la src", "find . -exec touch X ;"),
    ("ls -la src", "find . -delete"),
    ("ls -la src", "rm -rf src"),
    # npm: packages from the registry (and their lifecycle scripts), arguments to scripts, npm's options
    ("npm install", "npm install evil-package"),
    ("npm install", "npm install --ignore-scripts=false evil"),
    ("npm run test", "npm run test --script-shell=/tmp/evil"),
    ("npm run test", "npm run test -- --require=./evil.js"),
    ("npm test", "npm test -- -r evil"),
    # python and pytest: code, plugins, config, output files, arguments from files
    ("python -m pytest -q", "python -c print"),
    ("python -m pytest -q", "python evil.py"),
    ("python -m pytest -q", "python -I -m pytest"),
    ("python -m pytest -q", "python -m pytest -p evil"),
    ("pytest -q", "pytest -p evil_plugin"),
    ("pytest -q", "pytest -pevil"),
    ("pytest -q", "pytest --rootdir=/tmp/x"),
    ("pytest -q", "pytest -c /tmp/evil.ini"),
    ("pytest -q", "pytest --config-file=/tmp/evil.ini"),
    ("pytest -q", "pytest -o addopts=-pevil"),
    ("pytest -q", "pytest --basetemp=/home"),
    ("pytest -q", "pytest --junitxml=/tmp/x.xml"),
    ("pytest -q", "pytest -W error::evil.Warning"),
    ("pytest -q", "pytest @args.txt"),
    ("pytest -q", "pytest -k @args.txt"),
    ("python -m pytest -q", "python -m pytest -n @args.txt"),
    ("pytest -q", "pytest /tmp/tests"),
    ("pytest -q", "pytest ../other"),
    ("pytest -q", "pytest --pdb"),
    ("python3 -m unittest", "python3 -m unittest discover -s /tmp"),
    ("mypy refagent", "mypy --python-executable=/tmp/evil refagent"),
    ("mypy refagent", "mypy --install-types refagent"),
    ("mypy refagent", "mypy @args"),
    ("ruff check src", "ruff check --output-file=/tmp/x src"),
    ("ruff check src", "ruff check --fix src"),
    ("ruff check src", "ruff check --config=x src"),
    ("uv run pytest -q", "uv run --with evil pytest -q"),
    ("uv run pytest -q", "uv run python -c x"),
    ("uv run pytest -q", "uv run pytest -p evil"),
    # environment assignments in front
    ("pytest -q", "PYTEST_ADDOPTS=-pevil pytest -q"),
    ("git log --oneline", "GIT_PAGER=sh git log --oneline"),
    ("ls -la src", "LD_PRELOAD=/tmp/x.so ls -la src"),
    ("git status", "PATH=/tmp/evil git status"),
    # what the shell expands: globs, variables, braces, tilde, substitutions
    ("ls -la src", "ls *"),
    ("ls -la src", "ls src/?"),
    ("ls -la src", "ls [ab]"),
    ("ls -la src", "ls {src,/etc}"),
    ("cat README.md", "cat $HOME/.ssh/id_rsa"),
    ("cat README.md", "cat ${IFS}x"),
    ("cat README.md", "cat ~/.ssh/id_rsa"),
    ("head -n 5 README.md", "head -n 5 x=~/y"),
    ("git log --oneline", "git log --author=a:~"),
    ("echo done", "echo $(touch X)"),
    ("echo done", "echo `touch X`"),
    ("cat README.md", "cat <(touch X)"),
    # quotes, backslashes and comments that hide or change words
    ("git diff --stat", "git diff --out\\put=/tmp/x"),
    ("git diff --stat", "git diff '--output=/tmp/x'"),
    ("git diff --stat", 'git diff "--"output=/tmp/x'),
    ("git status", "git status #; touch X"),
    # operators and redirections
    ("git status", "git status; touch X"),
    ("git status", "git status && touch X"),
    ("git status", "git status || touch X"),
    ("git status", "git status | sh"),
    ("git status", "git status > /tmp/x"),
    ("git status", "git status 2>/tmp/x"),
    ("git status", "git status &"),
    ("echo done", "echo done > ~/.bashrc"),
    ("ls -la src", "ls -la src 2>&1 > /tmp/x"),
    # bytes and characters the eye or a parser reads differently
    ("git status", "git status\ntouch X"),
    ("git status", "git status\rtouch X"),
    ("git status", "git status\x00; touch X"),
    ("git diff --stat", "git diff --stat\u00a0--output=/tmp/x"),  # no-break space: one word for bash
    ("git status", "g\u0456t status"),  # Cyrillic i
    ("git status", "git status\uff1b touch X"),  # fullwidth semicolon
    ("git diff --stat", "git diff \u2013-output=/tmp/x"),  # en dash
    ("git status", "git status " + "a " * MAX_SCOPED_CHARS),
    # paths outside the working directory
    ("grep -rn x src", "grep -rn x /etc"),
    ("head -n 5 README.md", "head -n 5 -- /etc/shadow"),
    ("ls -la src", "ls -la .."),
    ("cat README.md", "cat .git/config"),  # remote URLs can hold tokens
    ("git diff --stat", "git diff --stat -- sub/.git/hooks"),
    ("tail -n 5 README.md", "tail -f /dev/zero"),
    # go and cargo: helpers, output files, packages from elsewhere
    ("go test ./...", "go test -exec=/tmp/evil ./..."),
    ("go test ./...", "go test -toolexec=x ./..."),
    ("go test ./...", "go test example.com/evil"),
    ("go build ./...", "go build -o /tmp/x ./..."),
    ("cargo build --release", "cargo build --config=build.rustc-wrapper=/tmp/x"),
    ("cargo build --release", "cargo build --target-dir=/tmp/x"),
    ("cargo build --release", "cargo +nightly build"),
    ("cargo test", "cargo test -- --logfile=/tmp/x"),
    # make: variables, other makefiles, other targets
    ("make test", "make test SHELL=/tmp/evil"),
    ("make test", "make test -f /tmp/evil.mk"),
    ("make test", "make test --eval=x"),
    ("make test", "make test install"),
    ("make", "make -C /tmp"),
    # wrappers
    ("pytest -q", "env pytest -q"),
    ("pytest -q", "sudo pytest -q"),
    ("git status", "xargs git status"),
    ("git status", "bash -c 'git status'"),
]
"""(allowed for good, hostile): every hostile command must get the exact scope."""

ELSEWHERE = [
    ("git status", "/tmp/evil/git status"),
    ("pytest -q", "./pytest -q"),
    ("python -m pytest -q", "/tmp/python -m pytest -q"),
    ("make test", "make deploy"),
    ("npm run test", "npm run postinstall"),
    ("git status", "git diff"),
]
"""(allowed for good, another command): both widened, but to other scopes."""

VARIANTS = [
    ("git status", "git status -s"),
    ("git status", "git status --porcelain=v2 -b src"),
    ("git status", "git\tstatus"),
    ("git diff --stat", "git diff --stat src/"),
    ("git diff --stat", "git diff HEAD~1 -- src/app.py"),
    ("git diff --stat", "git diff --cached --name-only"),
    ("git log --oneline", "git log -n 5 --stat"),
    ("git log --oneline", "git log origin/main..HEAD --format=%h"),
    ("git show HEAD", "git show HEAD^:README.md"),
    ("git grep -n x", "git grep -i other -- src"),
    ("pytest -q", "pytest -q tests/test_x.py"),
    ("pytest -q", "pytest -x -k slow tests/test_x.py::test_a"),
    ("pytest -q", "pytest -q 2>&1"),
    ("python -m pytest -q", "python -m pytest -vv --tb=short tests"),
    (".venv/bin/python -m pytest", ".venv/bin/python -m pytest -q"),
    ("python3 -m unittest", "python3 -m unittest -v tests.test_app"),
    ("uv run pytest -q", "uv run pytest tests"),
    ("mypy --strict refagent", "mypy refagent tests"),
    ("ruff check src", "ruff check --select=E501 tests"),
    ("ls -la src", "ls"),
    ("ls -la src", "ls -R docs >/dev/null"),
    ("cat README.md", "cat -n docs/a.md"),
    ("head -n 5 README.md", "head -20 a.txt"),
    ("grep -rn x src", "grep -i y README.md"),
    ("sed -n 1p README.md", "sed -n 1,20p docs/a.md"),
    ("echo hi", "echo done"),
    ("make test", "make test -j4"),
    ("make", "make -k"),
    ("npm run test", "npm run test 2>&1"),
    ("cargo build", "cargo build --release -p core"),
    ("go test ./...", "go test -race -run=TestX ./pkg"),
]
"""(allowed for good, a benign variant): the same scope, no second question."""


async def remembered(tmp_path: Path, allowed: str) -> Permissions:
    """A session's permissions after the user chose "Always allow" for ``allowed``, through the real tool."""
    permissions = Permissions()
    plan = await RunCommand().prepare({"command": allowed}, make_ctx(str(tmp_path)))
    options = {o["optionId"]: o["name"] for o in permissions.options(plan)}
    assert options[ALLOW_ALWAYS] == f"Always allow {plan.permission_label}"

    async def user(tool_call: dict[str, Any], options: list[PermissionOption]) -> PermissionAnswer:
        return PermissionAnswer("selected", ALLOW_ALWAYS)

    assert (await permissions.ask(user, {}, plan)).allowed
    assert permissions.allowed == {plan.permission_key}
    return permissions


async def decision(tmp_path: Path, permissions: Permissions, command: str) -> str:
    plan: Plan = await RunCommand().prepare({"command": command}, make_ctx(str(tmp_path)))
    return permissions.decide("ask", "execute", plan)[0]


@pytest.mark.parametrize(("allowed", "hostile"), ATTACKS)
async def test_a_hostile_command_is_asked_after_its_benign_one_was_allowed(
    allowed: str, hostile: str, tmp_path: Path
) -> None:
    assert permission_scope(allowed)[0].startswith("command:")  # the benign one was widened
    assert permission_scope(hostile) == (f"command-exact:{hostile}", "exactly this command")
    if "\x00" not in hostile:  # the tool refuses NUL later, at run time; the scope is checked above
        assert await decision(tmp_path, await remembered(tmp_path, allowed), hostile) == "ask"


@pytest.mark.parametrize(("allowed", "other"), ELSEWHERE)
async def test_another_program_or_subcommand_gets_another_scope(allowed: str, other: str, tmp_path: Path) -> None:
    assert permission_scope(other)[0].startswith("command:")
    assert permission_scope(other)[0] != permission_scope(allowed)[0]
    assert await decision(tmp_path, await remembered(tmp_path, allowed), other) == "ask"


@pytest.mark.parametrize(("allowed", "variant"), VARIANTS)
async def test_a_benign_variant_shares_the_scope(allowed: str, variant: str, tmp_path: Path) -> None:
    assert permission_scope(variant) == permission_scope(allowed)
    assert await decision(tmp_path, await remembered(tmp_path, allowed), variant) == "allow"


async def test_a_scope_holds_at_its_level_only(tmp_path: Path) -> None:
    permissions = await remembered(tmp_path, "git status -s")
    for level in ("network", "none"):
        plan = await RunCommand().prepare({"command": "git status", "sandbox": level}, make_ctx(str(tmp_path)))
        assert plan.permission_key == f"command@{level}:git status"
        assert permissions.decide("ask", "execute", plan)[0] == "ask"
    plan = await RunCommand().prepare({"command": "npm install", "sandbox": "network"}, make_ctx(str(tmp_path)))
    assert plan.permission_label == "`npm install` with no other arguments (network access)"


@pytest.mark.parametrize(
    ("command", "label"),
    [
        ("git status -s", "`git status` with read-only options and relative paths"),
        ("git diff --stat", "`git diff` with read-only options, revisions and relative paths"),
        ("sed -n 1p README.md", "`sed` printing numbered lines (`5p`, `1,20p`, `10q`) of relative paths, with "
         "`-n`, `-E` or `-s` only"),
        ("npm run test", "`npm run test` with no other arguments"),
        ("make test", "`make test` with only `-j`, `-k`, `-s` or `-B` (no other targets, files or variables)"),
        ("python3 -m pytest -q", "`python3 -m pytest` with reporting and test-selection options and relative "
         "test paths (no plugins, config or output files)"),
        ("git push", "exactly this command"),
    ],
)  # fmt: skip
def test_the_label_says_what_is_remembered(command: str, label: str) -> None:
    assert permission_scope(command)[1] == label


def test_every_entry_widens_its_own_words_and_says_so() -> None:
    filled = {NAME: "test", PYTHON: "python3"}
    for key in SCOPED_COMMANDS:
        words = " ".join(filled.get(word, word) for word in key)
        scope, label = permission_scope(words)
        assert scope == f"command:{words}", key
        assert label.startswith(f"`{words}` with ") or label.startswith(f"`{words}` printing "), label
        assert not label.endswith("."), label


def can_fill_both(one: str, other: str, first: bool) -> bool:
    """Whether some word fills both elements of two keys (``python`` fills :data:`NAME` and :data:`PYTHON`)."""
    if one in WILDCARDS and other in WILDCARDS:
        return True
    if other in WILDCARDS:
        one, other = other, one
    return _matches(one, other, first) if one in WILDCARDS else one == other


WILDCARDS = (NAME, PYTHON)


def test_no_two_entries_can_give_one_key() -> None:
    """Keys are compared for equality: a key must name one rule, whatever words filled it."""
    for one, other in itertools.combinations(SCOPED_COMMANDS, 2):
        if len(one) == len(other):
            pairs = enumerate(zip(one, other, strict=True))
            assert not all(can_fill_both(a, b, i == 0) for i, (a, b) in pairs), (one, other)


def test_no_wrapper_or_destructive_program_is_in_the_table() -> None:
    assert not {key[0] for key in SCOPED_COMMANDS} & (WRAPPERS | DESTRUCTIVE)
    assert permission_scope("find . -name x")[0] == "command-exact:find . -name x"
    assert permission_scope("mkfs.ext4 /dev/sda")[0].startswith("command-exact:")


def test_every_option_pattern_compiles_and_every_valued_option_checks_its_value() -> None:
    for rule in SCOPED_COMMANDS.values():
        re.compile(rule.options)
        for option in rule.valued:
            assert rule.accepts([option, "name"])
            assert not rule.accepts([option])
            assert not rule.accepts([option, "@file"])
            assert not rule.accepts([option, "--output=x"])


def test_a_huge_command_is_scoped_in_bounded_time() -> None:
    command = "git status " + "a" * 5_000_000
    started = time.perf_counter()
    assert permission_scope(command)[0].startswith("command-exact:")
    assert permission_scope("git status" + " " * 900 + "x")[0] == "command:git status"
    assert time.perf_counter() - started < 0.5
