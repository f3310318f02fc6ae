"""Escape attempts against the sandbox: the path policy and the local file system together, as a tool uses
them (check, then act on the resolved path), on pyfakefs and on the real disk.

For every attempt: a read that leaves the roots is marked ``inside=False`` (the user is asked), and
nothing outside the roots — nor ``.git`` (a nested repository's too), nor a root itself — is changed, which
is asserted on the real outcome (a snapshot of the outside tree and the protected files before and after),
not on messages.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from refagent.errors import ToolError
from refagent.sandbox.disk.local_fs import LocalFileSystem
from refagent.sandbox.disk.policy import RootPolicy

pytestmark = pytest.mark.anyio

SECRET = "TOP SECRET\n"

Expect = Literal["outside", "invalid", "inside", "protected", "toctou", "kept"]
Op = Literal["write", "delete", "move_out", "move_in"]


@dataclass
class World:
    base: str

    @property
    def proj(self) -> str:
        return f"{self.base}/proj"

    @property
    def extra(self) -> str:
        return f"{self.base}/extra"

    @property
    def outside(self) -> str:
        return f"{self.base}/outside"

    def build(self) -> None:
        for directory in ("proj/src", "proj/.git/hooks", "proj/vendor/lib/.git", "extra", "outside", "proj2"):
            os.makedirs(f"{self.base}/{directory}", exist_ok=True)
        for name, text in {
            "proj/src/app.py": "print('app')\n",
            "proj/.git/config": "[core]\n",
            "proj/vendor/lib/.git/config": "[core]\n",
            "proj/vendor/lib/lib.py": "x = 1\n",
            "extra/notes.md": "notes\n",
            "outside/secret.txt": SECRET,
            "proj2/x.txt": "sibling\n",
        }.items():
            Path(f"{self.base}/{name}").write_text(text)

    def snapshot(self) -> dict[str, str]:
        """Everything that must never change: the outside tree, the sibling, the .git dirs, and the roots."""
        seen: dict[str, str] = {}
        for top in (self.outside, f"{self.base}/proj2", f"{self.proj}/.git", f"{self.proj}/vendor/lib/.git"):
            for path in _walk(top):
                if os.path.islink(path):
                    seen[path] = "link -> " + os.readlink(path)
                elif os.path.isdir(path):
                    seen[path] = "dir"
                else:
                    seen[path] = Path(path).read_text()
        for root in (self.proj, self.extra):
            seen[root] = "dir" if os.path.isdir(root) and not os.path.islink(root) else "gone"
        return seen

    def really_inside(self, path: str) -> bool:
        """Checked with the standard library's realpath, independently of the policy."""
        real = os.path.realpath(path)
        roots = [os.path.realpath(self.proj), os.path.realpath(self.extra)]
        return any(real == root or real.startswith(root + "/") for root in roots)

    def read(self, path: str) -> str:
        return Path(path).read_text()


def _walk(top: str) -> Iterator[str]:
    if not os.path.lexists(top):
        return
    yield top
    if os.path.isdir(top) and not os.path.islink(top):
        for name in sorted(os.listdir(top)):
            yield from _walk(os.path.join(top, name))


@dataclass
class Case:
    id: str
    path: str | Callable[[World], str]
    expect: Expect
    op: Op = "write"
    setup: Callable[[World], None] | None = None
    swap: Callable[[World], None] | None = None
    """Runs between the check and the use (time of check to time of use)."""


def _link(name: str, target: str) -> Callable[[World], None]:
    def setup(world: World) -> None:
        os.symlink(target.format(w=world), f"{world.proj}/{name}")

    return setup


def _links(*pairs: tuple[str, str]) -> Callable[[World], None]:
    def setup(world: World) -> None:
        for link, target in pairs:
            os.symlink(target.format(w=world), link.format(w=world))

    return setup


def _swap_file_for_link(world: World) -> None:
    os.unlink(f"{world.proj}/src/app.py")
    os.symlink(f"{world.outside}/secret.txt", f"{world.proj}/src/app.py")


def _swap_dir_for_link(world: World) -> None:
    os.rename(f"{world.proj}/src", f"{world.proj}/src_old")
    os.symlink(world.outside, f"{world.proj}/src")


def _swap_subdir_for_link(world: World) -> None:
    os.symlink(world.outside, f"{world.proj}/src/sub")


def _chdir_outside(world: World) -> None:
    os.chdir(world.outside)


def _clone_into_src(world: World) -> None:
    os.makedirs(f"{world.proj}/src/clone/.git")
    Path(f"{world.proj}/src/clone/.git/HEAD").write_text("ref: refs/heads/main\n")


CASES = [
    # -- plain .. and absolute paths --
    Case("dotdot", "../outside/secret.txt", "outside"),
    Case("dotdot-from-subdir", "src/../../outside/secret.txt", "outside"),
    Case("dotdot-past-the-top", lambda w: "../" * 40 + w.outside.lstrip("/") + "/secret.txt", "outside"),
    Case("dots-and-slashes", "./src/.//../..//outside/./secret.txt", "outside"),
    Case("absolute", "{w.outside}/secret.txt", "outside"),
    Case("absolute-through-the-root", "{w.proj}/../outside/secret.txt", "outside"),
    Case("absolute-new-file", "{w.outside}/new.txt", "outside"),
    Case("trailing-slash", "{w.outside}/secret.txt/", "outside"),
    Case("dotdot-through-a-file", "src/app.py/../../../outside/secret.txt", "outside"),
    Case("dotdot-from-an-extra-root", "{w.extra}/../outside/secret.txt", "outside"),
    Case("sibling-with-the-same-prefix", "{w.proj}2/x.txt", "outside"),
    Case("parent-of-the-root", "..", "outside", op="delete"),
    # -- symbolic links --
    Case("file-link-out", "leak.txt", "outside", setup=_link("leak.txt", "{w.outside}/secret.txt")),
    Case("dir-link-out", "out/secret.txt", "outside", setup=_link("out", "{w.outside}")),
    Case("dir-link-out-new-file", "out/new.txt", "outside", setup=_link("out", "{w.outside}")),
    Case("relative-link-out", "rel/secret.txt", "outside", setup=_link("rel", "../outside")),
    Case(
        "link-chain-out",
        "a/secret.txt",
        "outside",
        setup=_links(("{w.proj}/a", "{w.proj}/b"), ("{w.proj}/b", "c"), ("{w.proj}/c", "../outside")),
    ),
    Case(
        "link-chain-through-an-extra-root",
        "x/secret.txt",
        "outside",
        setup=_links(("{w.proj}/x", "{w.extra}/y"), ("{w.extra}/y", "{w.outside}")),
    ),
    Case("dangling-link-out", "dang", "outside", setup=_link("dang", "{w.outside}/created.txt")),
    Case("dangling-link-into-a-missing-dir", "d2", "outside", setup=_link("d2", "{w.outside}/nodir/f")),
    Case("dangling-link-inside", "dang_in", "inside", setup=_link("dang_in", "{w.proj}/created_here.txt")),
    Case("link-to-slash", "rootlink{w.outside}/secret.txt", "outside", setup=_link("rootlink", "/")),
    Case("link-to-parent", "up/outside/secret.txt", "outside", setup=_link("up", "..")),
    Case("dotdot-after-a-link", "in/../../outside/secret.txt", "outside", setup=_link("in", "src")),
    Case(
        "link-loop",
        "loop1/x",
        "invalid",
        setup=_links(("{w.proj}/loop1", "{w.proj}/loop2"), ("{w.proj}/loop2", "{w.proj}/loop1")),
    ),
    Case("move-an-outside-file-in", "../outside/secret.txt", "outside", op="move_in"),
    Case("move-a-file-out-through-a-link", "out/moved.py", "outside", op="move_out", setup=_link("out", "{w.outside}")),
    # -- /proc --
    Case("proc-self-root", "/proc/self/root{w.outside}/secret.txt", "outside"),
    Case("proc-self-cwd", "/proc/self/cwd/secret.txt", "outside", setup=_chdir_outside),
    # -- home, bytes, lengths --
    Case("tilde", "~/secret.txt", "invalid"),
    Case("tilde-alone", "~", "invalid"),
    Case("nul-byte", "src/app.py\x00/../../outside/secret.txt", "invalid"),
    Case("very-long-path", "a/" * 3000 + "../" * 3001 + "outside/secret.txt", "invalid"),
    Case("very-long-component", "x" * 256, "invalid"),
    Case("lone-surrogate", "\ud800/../../outside/secret.txt", "invalid"),
    Case("undecodable-byte-name", "\udcff/../../outside/secret.txt", "outside"),
    # -- look-alikes: only ".." is the parent; these are names inside --
    Case("fullwidth-dots", "．．/outside/secret.txt", "inside"),
    Case("one-dot-leader", "‥/outside/secret.txt", "inside"),
    Case("combining-mark", "..\u0338/outside/secret.txt", "inside"),
    Case("rtl-override", "\u202e../outside/secret.txt", "inside"),
    Case("zero-width-space", ".\u200b./outside/secret.txt", "inside"),
    Case("backslashes", "..\\outside\\secret.txt", "inside"),
    Case("url-encoded", "%2e%2e/outside/secret.txt", "inside"),
    Case("file-url", "file://{w.outside}/secret.txt", "inside"),
    # -- case --
    Case("upper-case-root", lambda w: w.proj.upper() + "/../outside/secret.txt", "outside"),
    Case("upper-case-outside", "../OUTSIDE/secret.txt", "outside"),
    Case("upper-case-git", ".GIT/config", "protected"),
    # -- .git and the roots --
    Case("git-config", ".git/config", "protected"),
    Case("git-new-hook", ".git/hooks/pre-commit", "protected"),
    Case("git-through-dotdot", "src/../.git/config", "protected"),
    Case("git-through-a-link", "g/config", "protected", setup=_link("g", ".git")),
    Case("git-dir-delete", ".git", "protected", op="delete"),
    Case("root-delete-dot", ".", "protected", op="delete"),
    Case("root-delete-absolute", "{w.proj}", "protected", op="delete"),
    Case("root-delete-trailing-slash", "src/../", "protected", op="delete"),
    Case("extra-root-delete", "{w.extra}/", "protected", op="delete"),
    Case("root-move-away", "{w.extra}", "protected", op="move_in"),
    # -- a nested repository's .git (the policy refuses what is in it; the disk, a tree that holds it) --
    Case("nested-git-config", "vendor/lib/.git/config", "protected"),
    Case("nested-git-new-hook", "vendor/lib/.git/hooks/post-checkout", "protected"),
    Case("nested-git-upper-case", "vendor/lib/.GIT/config", "protected"),
    Case("nested-git-dir-delete", "vendor/lib/.git", "protected", op="delete"),
    Case("nested-git-move-out", "vendor/lib/.git/config", "protected", op="move_in"),
    Case("move-into-a-nested-git", "vendor/lib/.git/app.py", "protected", op="move_out"),
    Case("nested-repo-delete", "vendor/lib", "kept", op="delete"),
    Case("nested-repo-parent-delete", "vendor", "kept", op="delete"),
    Case("nested-repo-move-away", "vendor/lib", "kept", op="move_in"),
    Case("git-appears-before-a-delete", "src", "toctou", op="delete", swap=_clone_into_src),
    Case("git-appears-before-a-move", "src", "toctou", op="move_in", swap=_clone_into_src),
    # -- time of check to time of use --
    Case("file-swapped-for-a-link", "src/app.py", "toctou", swap=_swap_file_for_link),
    Case("dir-swapped-for-a-link", "src/new.txt", "toctou", swap=_swap_dir_for_link),
    Case("dir-swapped-before-mkdir-p", "src/deep/er/new.txt", "toctou", swap=_swap_dir_for_link),
    Case("dir-swapped-before-delete", "src/secret.txt", "toctou", op="delete", swap=_swap_dir_for_link),
    Case("dir-swapped-before-move", "src/sub/moved.py", "toctou", op="move_out", swap=_swap_subdir_for_link),
]


@pytest.fixture(params=["fake", "real"])
def world(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    monkeypatch.chdir(tmp_path)
    if request.param == "fake":
        request.getfixturevalue("fs")
        world = World("/w")
    else:
        world = World(str(tmp_path / "w"))
    world.build()
    monkeypatch.setenv("HOME", world.outside)
    return world


def _path(case: Case, world: World) -> str:
    return case.path(world) if callable(case.path) else case.path.format(w=world)


async def _attempt(case: Case, policy: RootPolicy, disk: LocalFileSystem, world: World, path: str) -> str:
    """Do what a tool does; 'refused' (at the check), 'refused at use', or 'done'."""
    try:
        if case.op == "write":
            target = policy.check_write(path)
        elif case.op == "delete":
            target = policy.check_write(path, follow_symlinks=False)
        elif case.op == "move_out":
            source = policy.check_write("src/app.py", follow_symlinks=False)
            target = policy.check_write(path, follow_symlinks=False)
        else:
            source = policy.check_write(path, follow_symlinks=False)
            target = policy.check_write("stolen.txt", follow_symlinks=False)
    except ToolError:
        return "refused"
    if case.swap is not None:
        case.swap(world)
        if case.op == "write":  # reading after the swap must not leak either
            with contextlib.suppress(ToolError, FileNotFoundError):
                assert SECRET not in await disk.read_text(target.path)
    try:
        if case.op == "write":
            await disk.write_text(target.path, "PWNED\n")
        elif case.op == "delete":
            await disk.delete(target.path, recursive=True)
        else:
            await disk.move(source.path, target.path)
    except ToolError:
        return "refused at use"
    return "done"


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
async def test_escape_attempt(case: Case, world: World) -> None:
    if case.setup is not None:
        case.setup(world)
    path = _path(case, world)
    before = world.snapshot()
    policy = RootPolicy(world.proj, [world.extra])
    disk = LocalFileSystem()

    # Reading: outside is never marked inside; what is marked inside really is.
    try:
        read = policy.resolve(path)
    except ToolError:
        read = None
    if case.expect == "invalid":
        assert read is None
    if case.expect == "outside":
        assert read is not None
        assert not read.inside
    if read is not None and read.inside:
        assert world.really_inside(read.path), read.path

    # Writing: the real outcome.
    outcome = await _attempt(case, policy, disk, world, path)
    assert world.snapshot() == before
    expected = {
        "outside": "refused",
        "invalid": "refused",
        "protected": "refused",
        "inside": "done",
        "toctou": "refused at use",
        "kept": "refused at use",
    }[case.expect]
    assert outcome == expected
    if case.expect == "inside":
        assert read is not None
        assert world.read(read.path) == "PWNED\n"


async def test_a_hard_link_to_an_outside_file_is_not_written_through(tmp_path: Path) -> None:
    # A hard link made before the session is indistinguishable from an ordinary file (it is inside);
    # the atomic replace still leaves the other name's content alone.
    world = World(str(tmp_path / "w"))
    world.build()
    os.link(f"{world.outside}/secret.txt", f"{world.proj}/hard.txt")
    policy = RootPolicy(world.proj, [])
    target = policy.check_write("hard.txt")
    await LocalFileSystem().write_text(target.path, "PWNED\n")
    assert world.read(f"{world.outside}/secret.txt") == SECRET


async def test_proc_self_fd_of_an_outside_directory(tmp_path: Path) -> None:
    world = World(str(tmp_path / "w"))
    world.build()
    policy = RootPolicy(world.proj, [])
    fd = os.open(world.outside, os.O_RDONLY)
    try:
        path = f"/proc/self/fd/{fd}/secret.txt"
        assert policy.resolve(path).path == f"{world.outside}/secret.txt"
        assert not policy.resolve(path).inside
        with pytest.raises(ToolError, match="outside"):
            policy.check_write(path)
    finally:
        os.close(fd)


def test_the_corpus_is_big_enough() -> None:
    assert len(CASES) >= 30
    assert len({case.id for case in CASES}) == len(CASES)
