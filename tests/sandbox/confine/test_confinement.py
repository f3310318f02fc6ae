"""Command confinement on the real kernel: attacks a model could write, run as approved commands, and the
ordinary work that must keep working. Every test runs on both paths a command can take: a local process
and the editor's terminal (:mod:`tests.support.sandboxed`). What a command may not read or leave for later
(secrets, terminals, git, editors' files) is in ``test_confinement_trust.py``.

These need Landlock and user namespaces. Where the machine lacks them the tests skip, unless
``REFAGENT_REQUIRE_SANDBOX`` is set (CI sets it): then the missing pieces are an error, not a skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent.sandbox.confine import landlock
from refagent.sandbox.confine.confinement import (
    GIT,
    LAUNCHER,
    LIFETIME,
    METADATA,
    NETWORK,
    NETWORK_UDP,
    PROCESSES,
    SECRETS,
    SIGNALS,
    TERMINALS,
    WRITES,
    Confinement,
    Support,
)
from refagent.sandbox.confine.launcher import CANNOT_CONFINE, parse
from refagent.sandbox.confine.private_tmp import remove_stale_private_dirs
from refagent.sandbox.confine.process import LocalTerminals
from refagent.sandbox.seams import Level
from tests.support.procs import alive, gone, survivors
from tests.support.sandboxed import CONFINED, SUPPORT, Sandboxed, box, outside

__all__ = ["box", "outside"]  # fixtures, found by name

pytestmark = CONFINED


@pytest.fixture
def escapee(tmp_path: Path) -> Iterator[Path]:
    """A path in the user's home that a confined command must not create (removed if it did)."""
    path = Path.home() / f".refagent-escape-{os.getpid()}-{tmp_path.name}"
    yield path
    if exists(path):
        path.unlink()


def read(path: Path) -> str:
    return path.read_text()


def exists(path: Path) -> bool:
    return path.exists()


def marker_number(tmp_path: Path, index: int) -> str:
    """A unique sleep duration, so the test can find the processes it started (and only those)."""
    return f"7{abs(hash(str(tmp_path))) % 100000:05d}.{index}"  # the whole path: xdist workers' names repeat


# -- writes ---------------------------------------------------------------------------------------------


async def test_writes_land_inside_the_workspace_and_nowhere_else(box: Sandboxed, escapee: Path) -> None:
    host_tmp = Path("/tmp") / f"refagent-escape-{os.getpid()}-{box.workspace.parent.name}"
    result = await box.sh(
        f"echo in > inside.txt; mkdir -p sub/deeper && echo deep > sub/deeper/f; echo out > {escapee}; "
        f"echo out > {host_tmp}; echo out > {box.outside}/new; mkdir {box.outside}/dir; "
        f"rm -f {box.outside}/../ws/inside.txt.not-there; echo done"
    )
    assert result.exit_code == 0, result.output
    assert read(box.workspace / "inside.txt") == "in\n"
    assert read(box.workspace / "sub" / "deeper" / "f") == "deep\n"
    assert not exists(escapee)
    assert not exists(host_tmp)
    assert list(box.outside.iterdir()) == []


async def test_existing_files_outside_cannot_be_changed_or_removed(box: Sandboxed) -> None:
    victim = box.outside / "precious.txt"
    victim.write_text("keep me\n")
    result = await box.sh(
        f"echo evil > {victim}; echo evil >> {victim}; true > {victim}; truncate -s 0 {victim}; rm -f {victim}; "
        f"mv {victim} {box.workspace}/taken; chmod 000 {victim}; cat {victim}"
    )
    assert victim.read_text() == "keep me\n"
    assert "keep me" in result.output  # reading is allowed everywhere
    # mv could only copy it (a read) and then failed to remove the original
    assert not exists(box.workspace / "taken") or (box.workspace / "taken").read_text() == "keep me\n"
    assert os.stat(victim).st_mode & 0o777 != 0


async def test_a_symlink_in_the_workspace_does_not_lead_outside(box: Sandboxed) -> None:
    target = box.outside / "target.txt"
    target.write_text("original\n")
    (box.workspace / "link").symlink_to(target)
    (box.workspace / "dirlink").symlink_to(box.outside, target_is_directory=True)
    await box.sh("echo evil > link; echo evil > dirlink/new.txt; ln -s /etc/passwd mine; echo x >> mine")
    assert target.read_text() == "original\n"
    assert not exists(box.outside / "new.txt")
    assert (box.workspace / "mine").is_symlink()  # making a link inside is fine: following it out is not


async def test_a_hardlink_cannot_bring_an_outside_file_in(box: Sandboxed) -> None:
    target = box.outside / "target.txt"
    target.write_text("original\n")
    result = await box.sh(f"ln {target} hard; cp -l {target} hard2; echo evil >> hard; echo end")
    assert "end" in result.output
    assert (box.workspace / "hard").read_text() == "evil\n"  # a new file of its own, not a second name
    assert not exists(box.workspace / "hard2")
    assert target.read_text() == "original\n"
    assert os.stat(target).st_nlink == 1


async def test_tmp_is_private_to_the_session_and_is_tmpdir(box: Sandboxed, tmp_path: Path) -> None:
    host_file = Path("/tmp") / f"refagent-host-visible-{os.getpid()}-{tmp_path.name}"
    host_file.write_text("host\n")
    try:
        first = await box.sh('echo "$TMPDIR"; echo mine > /tmp/kept.txt; mkdir -p "$TMPDIR/d"; ls /tmp')
        second = await box.sh("cat /tmp/kept.txt")
    finally:
        host_file.unlink()
    lines = first.output.splitlines()
    assert lines[0] == "/tmp"
    assert host_file.name not in first.output  # the host's /tmp is not what the command sees
    assert second.output == "mine\n"  # the same private directory for the whole session
    private = Path(box.confinement.private_tmp())
    assert not exists(Path("/tmp/kept.txt"))
    # The session's /tmp is the tmpfs its holder keeps: not even its directory on the host shows it.
    assert not exists(private / "kept.txt")
    box.confinement.close()
    assert not exists(private)


# -- network --------------------------------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


def _accepted(server: socket.socket) -> bool:
    try:
        connection, _ = server.accept()
    except BlockingIOError:
        return False
    connection.close()
    return True


CONNECT = "import socket,sys; s=socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')"
BIND = "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); print('bound')"


async def test_no_network_at_level_workspace(box: Sandboxed, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    connect = await box.sh(f'{sys.executable} -c "{CONNECT.format(port=port)}"')
    assert "connected" not in connect.output
    assert connect.exit_code != 0
    assert not _accepted(listener)
    if not box.confinement.support.netns:  # Landlock alone: no TCP at all, not even a loopback
        bind = await box.sh(f'{sys.executable} -c "{BIND}"')
        assert "bound" not in bind.output


OWN_SERVER = (
    "import socket; s=socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); "
    "c=socket.create_connection(('127.0.0.1', {port}), timeout=5); a,_=s.accept(); c.sendall(b'ping'); "
    "print('own server:', a.recv(4).decode())"
)


async def test_level_workspace_has_a_loopback_of_its_own(box: Sandboxed, listener: socket.socket) -> None:
    """A test suite's or dev server's 127.0.0.1 works inside the command; it is not the host's: the port the
    host's listener holds is free there, and the host's listener hears nothing."""
    if not box.confinement.support.netns:
        pytest.skip("this machine has no network namespace for commands")
    port = listener.getsockname()[1]
    result = await box.sh(f'{sys.executable} -c "{OWN_SERVER.format(port=port)}"')
    assert "own server: ping" in result.output, result.output
    assert not _accepted(listener)


async def test_level_network_reaches_the_network(box: Sandboxed, listener: socket.socket, escapee: Path) -> None:
    port = listener.getsockname()[1]
    result = await box.sh(f'{sys.executable} -c "{CONNECT.format(port=port)}"; echo x > {escapee}', "network")
    assert "connected" in result.output
    assert _accepted(listener)
    assert not exists(escapee)  # network access, still no writes outside


async def test_level_none_is_really_unconfined(box: Sandboxed, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    result = await box.sh(f'echo out > {box.outside}/new; {sys.executable} -c "{CONNECT.format(port=port)}"', "none")
    assert (box.outside / "new").read_text() == "out\n"
    assert "connected" in result.output


# -- other processes ------------------------------------------------------------------------------------


@pytest.fixture
def host_service(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    """A service of the host on a Unix socket under /run, where Docker, D-Bus and databases listen."""
    if not os.access("/run", os.W_OK):
        pytest.skip("cannot make a socket under /run here")
    path = f"/run/refagent-test-{os.getpid()}-{tmp_path.name}.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(8)
    server.setblocking(False)
    yield path, server
    server.close()
    os.unlink(path)


UNIX_CONNECT = "import socket; s=socket.socket(socket.AF_UNIX); s.connect('{path}'); print('connected')"


@pytest.mark.parametrize("level", ["workspace", "network"])
async def test_the_hosts_services_on_unix_sockets_are_out_of_reach(
    box: Sandboxed, host_service: tuple[str, socket.socket], level: Level
) -> None:
    path, server = host_service
    result = await box.sh(f'{sys.executable} -c "{UNIX_CONNECT.format(path=path)}"; cat /etc/resolv.conf', level)
    assert "connected" not in result.output
    assert not _accepted(server)
    if exists(Path("/etc/resolv.conf")):  # what name lookups need stays
        assert read(Path("/etc/resolv.conf")).strip() in result.output


async def test_level_none_reaches_the_hosts_services(box: Sandboxed, host_service: tuple[str, socket.socket]) -> None:
    path, server = host_service
    result = await box.sh(f'{sys.executable} -c "{UNIX_CONNECT.format(path=path)}"', "none")
    assert "connected" in result.output
    assert _accepted(server)


@pytest.fixture
def victim(tmp_path: Path) -> Iterator[tuple[int, str]]:
    """A process outside the sandbox with a secret in its environment (as the agent has its API key)."""
    secret = f"sk-victim-{tmp_path.name}"
    process = subprocess.Popen(["sleep", "600"], env={**os.environ, "VICTIM_API_KEY": secret}, stdin=subprocess.DEVNULL)
    yield process.pid, secret
    process.kill()
    process.wait()


async def test_other_processes_are_invisible_and_out_of_reach(box: Sandboxed, victim: tuple[int, str]) -> None:
    pid, secret = victim
    agent = os.getpid()
    result = await box.sh(
        f"cat /proc/{pid}/environ /proc/{agent}/environ; cat /proc/*/environ | tr '\\0' '\\n' | grep -c VICTIM_; "
        f"kill -TERM {pid}; kill -TERM {agent}; kill -TERM $PPID; ls /proc; echo end"
    )
    assert secret not in result.output
    assert "end" in result.output
    assert alive(pid)  # neither the victim nor the agent (this test) got the signal
    pids = [int(word) for word in result.output.split() if word.isdigit()]
    assert pids, result.output
    assert max(pids) < 50, result.output  # /proc lists the sandbox's few processes only


async def test_the_shell_sees_only_its_namespace(box: Sandboxed) -> None:
    result = await box.sh("echo $$; ps -e -o pid= 2>/dev/null | wc -l || true")
    assert int(result.output.split()[0]) < 10


# -- lifetime -------------------------------------------------------------------------------------------


ESCAPES = (
    "setsid sleep {0}1 & nohup sleep {0}2 >/dev/null 2>&1 & (sleep {0}3 &) ; sh -c 'sleep {0}4 &' & "
    "setsid sh -c '(setsid sleep {0}5 &) &' ; "
    "{python} -c 'import os\nif os.fork() == 0:\n os.setsid()\n if os.fork() == 0: "
    'os.execvp("sleep", ["sleep", "{0}6"])\' ; '
    # Wait until all six run (the double fork races us), and say how many did: the test must see six.
    "for i in $(seq 100); do n=$(cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -c '^{0}'); "
    '[ "$n" -ge 6 ] && break; sleep 0.05; done; echo "escaped: $n"; '
)


async def test_nothing_outlives_a_command_that_ends(box: Sandboxed, tmp_path: Path) -> None:
    base = marker_number(tmp_path, 1)
    result = await box.sh(ESCAPES.format(base, python=sys.executable) + "echo started")
    assert result.exit_code == 0, result.output
    assert "escaped: 6" in result.output
    assert await gone(base) == []


@pytest.mark.slow
async def test_nothing_outlives_a_command_that_times_out(box: Sandboxed, tmp_path: Path) -> None:
    base = marker_number(tmp_path, 2)
    result = await box.sh(ESCAPES.format(base, python=sys.executable) + "sleep 100", time_limit=3)
    assert result.timed_out
    assert "escaped: 6" in result.output
    assert await gone(base) == []


@pytest.mark.slow
async def test_nothing_outlives_a_cancelled_command(box: Sandboxed, tmp_path: Path) -> None:
    base = marker_number(tmp_path, 3)
    script = ESCAPES.format(base, python=sys.executable) + "sleep 100"
    with anyio.move_on_after(10) as scope:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(box.sh, script)
            while len(survivors(base)) < 6:  # noqa: ASYNC110 - the escapes are running: now cancel
                await anyio.sleep(0.02)
            tasks.cancel_scope.cancel()
    assert not scope.cancelled_caught
    assert await gone(base) == []


# -- ordinary work --------------------------------------------------------------------------------------


async def test_pytest_runs_and_keeps_its_cache(box: Sandboxed) -> None:
    (box.workspace / "test_it.py").write_text("import tempfile\n\ndef test_ok(tmp_path):\n    assert tmp_path\n")
    result = await box.sh(f"{sys.executable} -m pytest -q -p no:randomly test_it.py")
    assert result.exit_code == 0, result.output
    assert "1 passed" in result.output
    assert (box.workspace / ".pytest_cache").is_dir()


async def test_a_compiler_writes_into_the_workspace(box: Sandboxed) -> None:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    (box.workspace / "hello.c").write_text('#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n')
    result = await box.sh(f"{compiler} -o hello hello.c && ./hello")
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith("hello")


def _wheel(directory: Path) -> Path:
    """A minimal pure-Python wheel, so ``pip install`` needs no index and no build."""
    path = directory / "tinypkg-1.0-py3-none-any.whl"
    files = {
        "tinypkg/__init__.py": "VALUE = 42\n",
        "tinypkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
        "tinypkg-1.0.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{name},,\n" for name in files) + "tinypkg-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr("tinypkg-1.0.dist-info/RECORD", record)
    return path


@pytest.mark.slow
async def test_pip_install_target_into_the_workspace_at_level_network(box: Sandboxed) -> None:
    wheel = _wheel(box.outside)  # read from outside, installed inside
    result = await box.sh(
        f"{sys.executable} -m pip install --no-index --disable-pip-version-check -q --target lib {wheel} && "
        f"{sys.executable} -c 'import sys; sys.path.insert(0, \"lib\"); import tinypkg; print(tinypkg.VALUE)'",
        "network",
        time_limit=120,
    )
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith("42")
    assert exists(box.workspace / "lib" / "tinypkg" / "__init__.py")


async def test_exit_codes_and_signals_come_through(box: Sandboxed) -> None:
    assert (await box.sh("exit 7")).exit_code == 7
    killed = await box.sh("kill -KILL $$")
    assert killed.signal == "SIGKILL"
    assert (await box.sh("echo err >&2; echo err2 > /dev/stderr; echo ok > /dev/null; echo out")).output == (
        "err\nerr2\nout\n"
    )


# -- the launcher and the machine -----------------------------------------------------------------------


def test_the_probe_found_landlock_and_namespaces() -> None:
    assert SUPPORT.landlock == landlock.abi_version() >= 1
    assert SUPPORT.namespaces


def test_the_launcher_refuses_to_run_what_it_cannot_confine(tmp_path: Path) -> None:
    """A confinement step that fails ends the launcher with 125: the command never runs less confined.
    Here a confined command starts the launcher again to widen its sandbox; Landlock forbids the mounts."""
    marker = tmp_path / "ran"
    inner = [sys.executable, "-I", "-S", LAUNCHER, "--namespaces", "--write", "/", "--", "/bin/sh", "-c"]
    outer = [sys.executable, "-I", "-S", LAUNCHER, "--write", str(tmp_path), "--landlock", str(SUPPORT.landlock)]
    done = subprocess.run([*outer, "--", *inner, f"touch {marker}"], capture_output=True, check=False)
    assert done.returncode == CANNOT_CONFINE
    assert b"cannot confine" in done.stderr
    assert not exists(marker)


def test_launcher_options() -> None:
    options = parse(["--write", "/a", "--write", "/b", "--landlock", "6", "--deny-tcp", "--", "sh", "-c", "x"])
    assert (options.write, options.landlock, options.deny_tcp, options.command) == (
        ["/a", "/b"],
        6,
        True,
        ["sh", "-c", "x"],
    )
    with pytest.raises(SystemExit, match="unknown option"):
        parse(["--bogus", "--", "x"])
    with pytest.raises(SystemExit, match="no command"):
        parse(["--write", "/a"])
    with pytest.raises(SystemExit, match="needs a value"):
        parse(["--write"])


async def test_landlock_alone_still_confines_writes_and_tcp(tmp_path: Path, listener: socket.socket) -> None:
    """A machine without namespaces: Landlock still holds writes and TCP; what it cannot hold is said."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    degraded = Confinement([str(workspace)], SUPPORT.without(["namespaces"]))
    assert degraded.missing("workspace") == degraded.support.missing("workspace")
    assert PROCESSES in degraded.missing("workspace")
    terminals = LocalTerminals(confinement=degraded)
    port = listener.getsockname()[1]
    try:
        result = await terminals.run(
            f'echo x > {tmp_path}/out; echo y > inside; {sys.executable} -c "{CONNECT.format(port=port)}"',
            str(workspace),
            30,
        )
    finally:
        degraded.close()
    assert not exists(tmp_path / "out")
    assert exists(workspace / "inside")
    assert "connected" not in result.output


def test_support_is_honest_about_what_is_missing() -> None:
    nothing = Support()
    assert nothing.missing("none") == []
    assert nothing.missing("workspace") == [WRITES, NETWORK, SECRETS, TERMINALS, PROCESSES, SIGNALS, LIFETIME]
    assert NETWORK not in nothing.missing("network")
    landlock_only = [NETWORK_UDP, METADATA, GIT, SECRETS, TERMINALS, PROCESSES]
    assert Support(landlock=4).missing("workspace") == [*landlock_only, SIGNALS, LIFETIME]
    assert Support(landlock=6).missing("workspace") == landlock_only  # the keeper holds what a command leaves
    assert Support(landlock=3, namespaces=True, netns=False).missing("workspace") == [NETWORK]
    assert Support(landlock=3, namespaces=True, netns=True).missing("workspace") == []


def _args(**options: Any) -> list[str]:
    return Confinement(["/ws"], Support(**options)).argv(["/bin/sh", "-c", "true"], "workspace")


def test_the_launcher_is_asked_for_what_the_machine_has() -> None:
    full = _args(landlock=7, namespaces=True, netns=True)
    assert {"--namespaces", "--netns"} <= set(full)
    assert "--deny-tcp" not in full  # the namespace has no way out, and its own loopback stays usable
    assert "--deny-tcp" in _args(landlock=7, namespaces=True, netns=False)
    assert "--deny-tcp" in _args(landlock=4)
    assert full[full.index("--landlock") + 1] == "7"
    assert full[full.index("--write") + 1] == "/ws"
    assert full[-4:] == ["--", "/bin/sh", "-c", "true"]
    bare = _args()
    assert not {"--namespaces", "--netns", "--deny-tcp", "--landlock"} & set(bare)
    network = Confinement(["/ws"], Support(landlock=7, namespaces=True, netns=True)).argv(["x"], "network")
    assert "--netns" not in network
    assert "--deny-tcp" not in network
    assert "--landlock" in network
    none = Confinement(["/ws"], Support(landlock=7, namespaces=True, netns=True)).argv(["x"], "none")
    assert not {"--namespaces", "--landlock", "--write"} & set(none)


# -- what a command sees of the host --------------------------------------------------------------------


async def test_package_caches_are_private_writable_copies(tmp_path: Path, outside: Path) -> None:
    """``~/.cache`` and the like: a toolchain writes its locks and downloads, the host's cache never changes."""
    home = outside / "home"
    (home / ".cache" / "pip").mkdir(parents=True)
    (home / ".cache" / "pip" / "old").write_text("cached\n")
    (home / ".config").mkdir()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    confinement = Confinement([str(workspace)], SUPPORT, env={"HOME": str(home)})
    terminals = LocalTerminals(confinement=confinement)
    try:
        first = await terminals.run(
            f"echo new > {home}/.cache/pip/new && cat {home}/.cache/pip/old && echo evil > {home}/.config/x",
            str(workspace),
            30,
        )
        second = await terminals.run(f"cat {home}/.cache/pip/new", str(workspace), 30)
    finally:
        confinement.close()
    assert confinement.caches == [str(home / ".cache")]
    assert "cached" in first.output
    assert second.output == "new\n"  # the session's copy lasts from one command to the next
    assert sorted(p.name for p in (home / ".cache" / "pip").iterdir()) == ["old"]  # the host's is unchanged
    assert not exists(home / ".config" / "x")  # and the rest of home stays read-only


@pytest.mark.parametrize("planted", ["/tmp/.refagent-caches", "/tmp/.refagent-caches/0/upper"])
async def test_a_link_planted_where_a_cache_layer_goes_is_not_followed(
    tmp_path: Path, outside: Path, planted: str
) -> None:
    """A command leaves a link where the next command's cache layer is made (its /tmp is the session's):
    the layer is made in the session's directory all the same, and writes to the cache never land where
    the link led, outside the roots."""
    home = outside / "home"
    (home / ".cache").mkdir(parents=True)
    victim = outside / "victim"
    victim.mkdir()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    confinement = Confinement([str(workspace)], SUPPORT, env={"HOME": str(home)})
    terminals = LocalTerminals(confinement=confinement)
    try:
        await terminals.run(f"rm -rf {planted} && ln -s {victim} {planted}", str(workspace), 30)
        written = await terminals.run(
            f"echo pwned > {home}/.cache/pwned && cat {home}/.cache/pwned", str(workspace), 30
        )
    finally:
        confinement.close()
    assert written.output == "pwned\n"  # the cache still works
    assert list(victim.iterdir()) == []
    assert not exists(home / ".cache" / "pwned")


async def test_toolchains_under_tmp_stay_visible_and_the_rest_of_tmp_does_not(tmp_path: Path) -> None:
    """A checkout in /tmp runs its own virtual environment (CI does): what PATH names there shows,
    read-only; other files in the host's /tmp do not."""
    tools = tmp_path / "tools" / "bin"
    tools.mkdir(parents=True)
    (tools / "mytool").write_text("#!/bin/sh\necho tool ran\n")
    (tools / "mytool").chmod(0o755)
    (tmp_path / "secret.txt").write_text("not yours\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    confinement = Confinement([str(workspace)], SUPPORT, env=env)
    terminals = LocalTerminals(env=env, confinement=confinement)
    try:
        result = await terminals.run(
            f"mytool; cat {tmp_path}/secret.txt; echo x > {tools}/mine; echo done", str(workspace), 30
        )
    finally:
        confinement.close()
    assert str(tmp_path / "tools") in confinement.shown
    assert "tool ran" in result.output
    assert "not yours" not in result.output
    assert not exists(tools / "mine")
    assert "done" in result.output


def test_private_directories_no_agent_holds_are_removed() -> None:
    """After a ``kill -9`` its lock is free: the next agent removes the directory (and only such ones)."""
    stale = Path(tempfile.mkdtemp(prefix="refagent-tmp-"))
    (stale / "sub").mkdir()
    (stale / "sub" / "f").write_text("left by a kill -9")
    (stale / "sub").chmod(0o500)
    Path(f"{stale}.lock").write_text("")
    live = Confinement(["/nonexistent"], SUPPORT)
    held = Path(live.private_tmp())
    try:
        removed = remove_stale_private_dirs()
        # Gone: by this sweep, or by a real agent's that another test started meanwhile (each sweeps /tmp).
        assert not exists(stale)
        assert not exists(Path(f"{stale}.lock"))
        assert exists(held)  # its lock is held: its agent lives
        assert str(held) not in removed
    finally:
        live.close()
    assert not exists(held)
    assert not exists(Path(f"{held}.lock"))
    assert not exists(Path(f"{held}.layers"))
