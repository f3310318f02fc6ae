"""The path policy (refagent.sandbox.disk.policy) on a fake file system (pyfakefs)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyfakefs.fake_filesystem import FakeFilesystem

from refagent.errors import ToolError
from refagent.sandbox.disk.policy import RootPolicy

CWD = "/work/proj"
EXTRA = "/data/extra"


@pytest.fixture
def policy(fs: FakeFilesystem) -> RootPolicy:
    fs.create_file(f"{CWD}/src/app.py", contents="print('hi')\n")
    fs.create_file(f"{CWD}/.git/config", contents="[core]\n")
    fs.create_file(f"{EXTRA}/notes.md", contents="notes\n")
    fs.create_file("/work/proj2/other.txt", contents="other\n")
    fs.create_file("/etc/passwd", contents="root:x:0:0\n")
    fs.create_dir("/elsewhere")
    os.chdir("/elsewhere")  # the process cwd must not matter
    return RootPolicy(CWD, [EXTRA])


def test_relative_paths_resolve_against_the_session_cwd(policy: RootPolicy) -> None:
    resolved = policy.resolve("src/app.py")
    assert resolved.path == f"{CWD}/src/app.py"
    assert resolved.inside
    assert resolved.display == "src/app.py"


def test_display_of_the_cwd_additional_roots_and_outside(policy: RootPolicy) -> None:
    assert policy.resolve(".").display == "."
    assert policy.resolve(CWD + "/").display == "."
    extra = policy.resolve(f"{EXTRA}/notes.md")
    assert (extra.inside, extra.display) == (True, f"{EXTRA}/notes.md")
    outside = policy.resolve("/etc/passwd")
    assert (outside.inside, outside.display) == (False, "/etc/passwd")


def test_paths_are_normalised(policy: RootPolicy) -> None:
    assert policy.resolve("./src//./app.py").path == f"{CWD}/src/app.py"
    assert policy.resolve("src/../src/app.py/").path == f"{CWD}/src/app.py"
    assert policy.resolve("//work///proj/src").path == f"{CWD}/src"


def test_a_sibling_with_the_same_prefix_is_outside(policy: RootPolicy) -> None:
    assert not policy.resolve("/work/proj2/other.txt").inside
    assert not policy.resolve("../proj2/other.txt").inside


def test_a_missing_path_resolves_its_deepest_existing_parent(fs: FakeFilesystem, policy: RootPolicy) -> None:
    fs.create_symlink(f"{CWD}/lib", f"{CWD}/src")
    resolved = policy.resolve("lib/new/deeper/file.py")
    assert resolved.path == f"{CWD}/src/new/deeper/file.py"
    assert resolved.inside


def test_dotdot_after_a_link_is_physical(fs: FakeFilesystem, policy: RootPolicy) -> None:
    fs.create_dir(f"{CWD}/a/b")
    fs.create_symlink(f"{CWD}/jump", f"{CWD}/a/b")
    # like the kernel: jump/.. is the parent of the target (a), not the directory holding the link
    assert policy.resolve("jump/..").path == f"{CWD}/a"


def test_a_symlinked_cwd_is_resolved(fs: FakeFilesystem) -> None:
    fs.create_file("/private/home/proj/x.txt")
    fs.create_symlink("/home", "/private/home")
    policy = RootPolicy("/home/proj", [])
    assert policy.cwd == "/private/home/proj"
    resolved = policy.resolve("/home/proj/x.txt")
    assert (resolved.path, resolved.inside, resolved.display) == ("/private/home/proj/x.txt", True, "x.txt")
    assert policy.resolve("x.txt").path == "/private/home/proj/x.txt"


def test_roots_must_be_absolute(fs: FakeFilesystem) -> None:
    with pytest.raises(ValueError, match="absolute"):
        RootPolicy("relative/dir", [])
    with pytest.raises(ValueError, match="absolute"):
        RootPolicy("/abs", ["rel"])


def test_without_following_the_final_link(fs: FakeFilesystem, policy: RootPolicy) -> None:
    fs.create_symlink(f"{CWD}/to_passwd", "/etc/passwd")
    followed = policy.resolve("to_passwd")
    assert (followed.path, followed.inside) == ("/etc/passwd", False)
    itself = policy.check_write("to_passwd", follow_symlinks=False)  # deleting the link itself is fine
    assert (itself.path, itself.inside) == (f"{CWD}/to_passwd", True)
    with pytest.raises(ToolError, match="outside"):
        policy.check_write("to_passwd")
    # the directories above are still resolved
    fs.create_symlink(f"{CWD}/out", "/etc")
    with pytest.raises(ToolError, match="outside"):
        policy.check_write("out/passwd", follow_symlinks=False)


def test_writes_inside_are_allowed(policy: RootPolicy) -> None:
    assert policy.check_write("src/app.py").path == f"{CWD}/src/app.py"
    assert policy.check_write("new/dir/file.txt").inside
    assert policy.check_write(f"{EXTRA}/notes.md").inside
    assert policy.check_write(".gitignore").inside
    assert policy.check_write(".github/workflows/ci.yml").inside


def test_write_outside_message_says_what_and_what_to_do(policy: RootPolicy) -> None:
    with pytest.raises(ToolError) as info:
        policy.check_write("/etc/passwd")
    message = str(info.value)
    assert "'/etc/passwd' is outside the workspace roots (/work/proj, /data/extra)" in message
    assert "writes there are not allowed" in message


def test_write_through_a_link_message_names_the_link(fs: FakeFilesystem, policy: RootPolicy) -> None:
    fs.create_symlink(f"{CWD}/etc", "/etc")
    with pytest.raises(ToolError) as info:
        policy.check_write("etc/passwd")
    assert "'etc/passwd' resolves through a symbolic link to '/etc/passwd'" in str(info.value)


@pytest.mark.parametrize(
    "path",
    [
        ".git/config",
        ".git",
        ".git/hooks/pre-commit",
        "src/../.git/config",
        ".GIT/config",
        "sub/.git/HEAD",
        # a nested repository's, at any depth, and a submodule's .git file
        "vendor/lib/.git",
        "vendor/lib/.git/config",
        "a/b/c/d/e/.git/objects/ab/cdef",
        "vendor/lib/.Git/hooks/post-checkout",
        f"{EXTRA}/module/.git",
    ],
)
def test_git_internals_cannot_be_written(fs: FakeFilesystem, policy: RootPolicy, path: str) -> None:
    with pytest.raises(ToolError, match=r"\.git internals cannot be edited"):
        policy.check_write(path)


def test_git_internals_can_be_read(policy: RootPolicy) -> None:
    assert policy.resolve(".git/config").inside


@pytest.mark.parametrize("path", [".", CWD, "src/..", EXTRA, f"{EXTRA}/", "./"])
def test_roots_are_protected(policy: RootPolicy, path: str) -> None:
    with pytest.raises(ToolError, match="workspace root"):
        policy.check_write(path)


def test_a_directory_containing_a_nested_root_is_protected(fs: FakeFilesystem) -> None:
    fs.create_dir("/p/sub/inner")
    policy = RootPolicy("/p", ["/p/sub/inner"])
    with pytest.raises(ToolError, match="contains the workspace root /p/sub/inner"):
        policy.check_write("sub")
    assert policy.check_write("sub/inner/file.txt").inside


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("", "empty"),
        ("a\x00b", "NUL byte"),
        ("x" * 300, "longer than 255 bytes"),
        ("a/" * 2100, "limited to 4096 bytes"),
        ("bad\udc80\ud800name", "cannot be used in a file name"),
        ("~", "not expanded"),
        ("~/notes.txt", "not expanded"),
        ("~root/.bashrc", "not expanded"),
    ],
)
def test_invalid_paths_are_clean_tool_errors(policy: RootPolicy, path: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        policy.resolve(path)
    with pytest.raises(ToolError, match=message):
        policy.check_write(path)


def test_tilde_elsewhere_is_an_ordinary_name(policy: RootPolicy) -> None:
    assert policy.resolve("a/~").path == f"{CWD}/a/~"
    assert policy.resolve("~no-such-user-here/x").path == f"{CWD}/~no-such-user-here/x"


def test_symlink_loops_are_clean_tool_errors(fs: FakeFilesystem, policy: RootPolicy) -> None:
    fs.create_symlink(f"{CWD}/loop1", f"{CWD}/loop2")
    fs.create_symlink(f"{CWD}/loop2", f"{CWD}/loop1")
    fs.create_symlink(f"{CWD}/self", "self")
    for path in ("loop1", "loop2/x", "self/y"):
        with pytest.raises(ToolError, match="Too many levels of symbolic links"):
            policy.resolve(path)


def test_a_long_chain_within_the_limit_resolves(fs: FakeFilesystem, policy: RootPolicy) -> None:
    fs.create_dir(f"{CWD}/target")
    previous = f"{CWD}/target"
    for index in range(30):
        fs.create_symlink(f"{CWD}/hop{index}", previous)
        previous = f"{CWD}/hop{index}"
    assert policy.resolve("hop29/f").path == f"{CWD}/target/f"


def test_display_escapes_invisible_and_control_characters(policy: RootPolicy) -> None:
    assert policy.resolve("evil\u202etxt.sh").display == "evil\\u202etxt.sh"
    assert policy.resolve("two\nlines").display == "two\\x0alines"
    assert policy.resolve("zero\u200bwidth").display == "zero\\u200bwidth"
    assert policy.resolve("café/日本").display == "café/日本"  # ordinary Unicode stays as it is


# -- property: agrees with the standard library's realpath on every path we can build --------------------

_PARTS = st.sampled_from(["..", ".", "", "src", "app.py", "link_out", "link_in", "dangling", "chain", "new", "~x"])


def _layout(fs: FakeFilesystem) -> RootPolicy:
    fs.create_file(f"{CWD}/src/app.py")
    fs.create_file("/outside/secret.txt")
    fs.create_symlink(f"{CWD}/link_out", "/outside")
    fs.create_symlink(f"{CWD}/src/link_in", "..")
    fs.create_symlink(f"{CWD}/dangling", "/outside/missing")
    fs.create_symlink(f"{CWD}/chain", f"{CWD}/src/link_in")
    return RootPolicy(CWD, [])


@settings(max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(parts=st.lists(_PARTS, min_size=1, max_size=8), absolute=st.booleans())
def test_matches_os_path_realpath(fs: FakeFilesystem, parts: list[str], absolute: bool) -> None:
    if not os.path.exists(CWD):
        _layout(fs)
    policy = RootPolicy(CWD, [])
    path = ("/" if absolute else "") + "/".join(parts)
    if not path.strip("/") and not absolute:
        return
    expected = os.path.realpath(os.path.join(CWD, path))
    resolved = policy.resolve(path)
    assert resolved.path == expected
    assert resolved.inside == (expected == CWD or expected.startswith(CWD + "/"))
    try:
        written = policy.check_write(path)
    except ToolError:
        return
    assert written.path.startswith(CWD + "/")
