"""gitignore rules (refagent.sandbox.ignore) on a fake file system."""

from __future__ import annotations

import pytest
from pyfakefs.fake_filesystem import FakeFilesystem

from refagent.sandbox.ignore import GitIgnore

ROOT = "/repo"


@pytest.fixture
def rules(fs: FakeFilesystem) -> GitIgnore:
    fs.create_file(f"{ROOT}/.gitignore", contents="*.log\n!keep.log\nbuild/\n/top-only.txt\nsecret/\n# comment\n")
    fs.create_file(f"{ROOT}/sub/.gitignore", contents="!debug.log\nlocal.txt\n")
    fs.create_file(f"{ROOT}/.git/info/exclude", contents="excluded.txt\n")
    return GitIgnore(ROOT)


@pytest.mark.parametrize(
    ("path", "is_dir", "ignored"),
    [
        ("app.py", False, False),
        ("app.log", False, True),
        ("deep/er/app.log", False, True),
        ("keep.log", False, False),
        ("build", True, True),
        ("build", False, False),  # a file named build: "build/" matches directories only
        ("build/out.o", False, True),
        ("src/build/out.o", False, True),
        ("top-only.txt", False, True),
        ("src/top-only.txt", False, False),
        ("sub/debug.log", False, False),  # the deeper .gitignore re-includes it
        ("sub/other.log", False, True),
        ("sub/local.txt", False, True),
        ("local.txt", False, False),
        ("secret/!keep.txt", False, True),
        ("excluded.txt", False, True),
        (".git", True, True),
        (".git/config", False, True),
        ("sub/.git/HEAD", False, True),
        (".gitignore", False, False),
    ],
)
def test_is_ignored(rules: GitIgnore, path: str, is_dir: bool, ignored: bool) -> None:
    assert rules.is_ignored(path, is_dir=is_dir) is ignored
    assert rules.is_ignored(f"{ROOT}/{path}", is_dir=is_dir) is ignored


def test_a_file_in_an_excluded_directory_cannot_be_re_included(fs: FakeFilesystem) -> None:
    fs.create_file(f"{ROOT}/.gitignore", contents="vendor/\n!vendor/keep.txt\n")
    assert GitIgnore(ROOT).is_ignored("vendor/keep.txt")


def test_outside_and_the_root_itself_are_not_ignored(rules: GitIgnore) -> None:
    assert not rules.is_ignored("/elsewhere/app.log")
    assert not rules.is_ignored(ROOT, is_dir=True)


def test_forget_rereads_a_changed_gitignore(fs: FakeFilesystem, rules: GitIgnore) -> None:
    assert not rules.is_ignored("notes.md")
    fs.remove(f"{ROOT}/.gitignore")
    fs.create_file(f"{ROOT}/.gitignore", contents="*.md\n")
    assert not rules.is_ignored("notes.md")  # cached
    rules.forget(ROOT)
    assert rules.is_ignored("notes.md")


def test_a_broken_gitignore_does_not_break_the_rules(fs: FakeFilesystem) -> None:
    fs.create_file(f"{ROOT}/.gitignore", contents=b"*.tmp\n\xff\xfe\n[z-a]\n")
    assert GitIgnore(ROOT).is_ignored("x.tmp")
