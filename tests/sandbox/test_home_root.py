"""A session whose root is the user's home directory, before any ``refagent login``: nothing a confined
command or a file tool the user was not asked about writes may change what the next ``refagent`` loads, or
what another program outside the sandbox takes from the home later. On the real kernel; each attack is one a
hostile repository or model would try, and fails without the defence it names."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from refagent.config import load
from refagent.errors import ToolError
from refagent.sandbox.confine.confinement import Confinement, own_paths
from refagent.sandbox.confine.process import LocalTerminals
from refagent.sandbox.disk.policy import RootPolicy
from refagent.sandbox.local import local_sandbox
from tests.support.sandboxed import CONFINED, SUPPORT, outside

__all__ = ["outside"]  # a fixture, found by name

pytestmark = CONFINED

BARE = "echo 'ref: refs/heads/main' > {0}/HEAD; printf '[core]\\n\\tpager = touch pwned\\n' > {0}/config"
"""The rest of a bare repository in a directory: git reads its config when run there (``git log`` pages)."""
EVIL = 'tools = ["evil_tool:Evil"]\ntool_path = ["~/planted"]\n'


@pytest.fixture
def home(outside: Path) -> Path:
    """A home with no file of refagent's yet (the key comes from the environment), and a project in it."""
    home = outside / "home"
    (home / "project" / ".git").mkdir(parents=True)
    (home / "project" / ".github" / "workflows").mkdir(parents=True)
    (home / "project" / ".github" / "workflows" / "ci.yml").write_text("ordinary\n")
    (home / "project" / "vendored" / "lib" / ".git").mkdir(parents=True)
    (home / ".config").mkdir()
    return home


def env_of(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}


async def run(home: Path, script: str, private: list[str] = ()) -> str:  # type: ignore[assignment]
    """``script`` at ``workspace`` in a session whose root is ``home`` (the launcher finds it in ``$HOME``)."""
    env = env_of(home)
    confinement = Confinement([str(home)], SUPPORT, env=env, private=private)
    try:
        result = await LocalTerminals(confinement=confinement, env=env).run(script, str(home), 30)
    finally:
        confinement.close()
    return result.output


def git_dir(directory: Path) -> str:
    """What git, run there unconfined as the user would, says is its repository."""
    done = subprocess.run(["git", "rev-parse", "--git-dir"], cwd=directory, capture_output=True, text=True, check=False)
    return done.stdout + done.stderr


def is_directory(path: str) -> bool:
    return Path(path).is_dir()


def loaded(home: Path) -> list[str]:
    """The custom tools (and where they come from) the next ``refagent`` would load."""
    config = load(None, env_of(home))
    return [*config.tools, *map(str, config.tool_path)]


@pytest.mark.parametrize(
    "attack",
    [
        # Straight in: the directory does not exist yet.
        "mkdir -p ~/.config/refagent && printf '{evil}' > ~/.config/refagent/config.toml",
        # Around the hold: move the directory above it away, and make the path anew.
        "mv ~/.config ~/.config-old; mkdir -p ~/.config/refagent && printf '{evil}' > ~/.config/refagent/config.toml",
        "rm -rf ~/.config; mkdir -p ~/.config/refagent && printf '{evil}' > ~/.config/refagent/config.toml",
        # A link in its place, to a file the command writes.
        "rm -rf ~/.config; printf '{evil}' > ~/c.toml; mkdir -p ~/x/refagent; ln -s ~/c.toml ~/x/refagent/config.toml;"
        " ln -s ~/x ~/.config",
    ],
)
async def test_a_command_cannot_make_the_agents_configuration(home: Path, attack: str) -> None:
    output = await run(home, attack.format(evil=EVIL.replace("\n", "\\n")) + "; echo end")
    assert output.rstrip().endswith("end"), output
    assert loaded(home) == []
    assert not (home / ".config" / "refagent" / "config.toml").exists()
    assert (home / ".config" / "refagent").is_dir()  # made by the agent, before the command ran
    assert oct((home / ".config" / "refagent").stat().st_mode & 0o777) == "0o700"


async def test_the_agents_own_directories_and_log_file_are_made_and_hidden(home: Path) -> None:
    """Made before the first command, so they can be hidden: the log file named on the command line
    included (a command could otherwise plant a link there, for the agent to append its log through)."""
    log = home / "logs" / "agent.log"
    log.parent.mkdir()
    output = await run(
        home,
        f"ln -s ~/.bashrc {log} || echo refused; echo x > ~/.local/share/refagent/new || echo refused; "
        "ls -A ~/.local/state/refagent ~/.cache/refagent; echo end",
        private=[str(log)],
    )
    assert output.count("refused") == 2, output
    assert log.is_file()
    assert not log.is_symlink()
    assert [path for path in own_paths(env_of(home)) if not is_directory(path)] == []
    assert not (home / ".local" / "share" / "refagent" / "new").exists()


@pytest.mark.parametrize(
    ("attack", "made"),
    [
        # What an editor or CI runs later, in a repository in the home: made anew, and (held) made around
        # the hold by moving the directory above it away.
        ("mkdir -p project/.vscode; echo x > project/.vscode/tasks.json", "project/.vscode"),
        ("mv project/.github gh; mkdir -p project/.github/workflows; echo x > project/.github/workflows/ci.yml", None),
        # A nested repository's directory moved away, and a repository made in its place.
        ("mv project/vendored v; mkdir -p project/vendored/lib/.git; echo x > project/vendored/lib/.git/config", None),
        # A credential that does not exist yet, which another program takes orders from later
        # (kubectl runs the program an `exec` entry names).
        ("mkdir ~/.kube; printf 'users:\\n- user:\\n    exec:\\n      command: evil\\n' > ~/.kube/config", ".kube"),
        ("mkdir -p ~/.ssh; echo 'ssh-ed25519 AAAA attacker' > ~/.ssh/authorized_keys", ".ssh"),
        # A repository by its shape, not its name (a bare one), whose configuration git takes there: in a
        # directory of the root, and the root itself.
        (f"mkdir -p notes/objects notes/refs; {BARE.format('notes')}", "notes/HEAD"),
        (f"mkdir -p objects refs; {BARE.format('.')}", "HEAD"),
        # What every later build there takes orders from: cargo runs a rustc-wrapper from the home's config.
        (
            "mkdir -p ~/.cargo; printf '[build]\\nrustc-wrapper = \"evil\"\\n' > ~/.cargo/config.toml",
            ".cargo/config.toml",
        ),
    ],
)
async def test_what_other_programs_take_later_cannot_be_made_around_the_hold(
    home: Path, attack: str, made: str | None
) -> None:
    output = await run(home, f"cd {home}; {attack}; echo end")
    assert output.rstrip().endswith("end") or "refagent: moved" in output, output
    assert (home / "project" / ".github" / "workflows" / "ci.yml").read_text() == "ordinary\n"
    assert not (home / "project" / "vendored" / "lib" / ".git" / "config").exists()
    if made is not None:
        assert not (home / made).exists()
        assert (home / f"{made}.refagent-blocked").exists()  # moved aside, nothing deleted
        assert f"refagent: moved {home / made} to {home / made}.refagent-blocked" in output
    if made is not None and made.endswith("HEAD"):  # git no longer takes the directory for a repository
        assert "not a git repository" in git_dir((home / made).parent)


def test_the_file_tools_keep_the_agents_files_before_they_exist(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy of a session in the home: the agent's files and the credentials are private whether or
    not they exist, and a directory that holds one can be neither moved nor deleted."""
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "REFAGENT_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    policy = local_sandbox(str(home), []).policy
    assert isinstance(policy, RootPolicy)
    for path in ("~/.config/refagent/config.toml", "~/.kube/config", "~/.ssh/authorized_keys"):
        with pytest.raises(ToolError, match="outside"):
            policy.check_write(path.replace("~", str(home)))
        assert not policy.resolve(path.replace("~", str(home))).inside  # a read asks
    with pytest.raises(ToolError, match=r"contains .*refagent, which is private"):
        policy.check_write(str(home / ".config"))
    assert policy.check_write(str(home / "project" / "app.py")).inside
