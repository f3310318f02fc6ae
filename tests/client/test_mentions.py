"""``@path`` mentions: the workspace as git sees it completes them, and each file mentioned goes to the agent
as a resource link (an image inline, when the agent takes images)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from refagent.client.mentions import MAX_IMAGE_BYTES, Mention, WorkspaceIndex, mention_at, mentioned, prompt_blocks
from refagent.sandbox.disk.policy import RootPolicy

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def workspace(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("print('hi')\n")
    (tmp_path / "src" / "apple.txt").write_text("fruit\n")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "app.py").write_text("# generated\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "app.cfg").write_text("")
    (tmp_path / ".gitignore").write_text("build/\n")
    (tmp_path / "shot.png").write_bytes(PNG)
    (tmp_path / "outside").symlink_to("/etc")
    return tmp_path


def test_completion_lists_the_workspace_as_git_sees_it(tmp_path: Path) -> None:
    index = WorkspaceIndex(str(workspace(tmp_path)))
    assert index.complete("app") == ["src/app.py", "src/apple.txt"]  # not build/ (ignored), nor .git
    assert index.complete("src/") == ["src/app.py", "src/apple.txt"]
    assert index.complete("sr") == ["src/"]
    assert index.complete("etc") == []  # a link is not followed
    assert "outside" in index.complete("outs")
    assert index.complete("nothing") == []


def test_the_mention_at_the_cursor() -> None:
    assert mention_at("explain @src/ap") == "src/ap"
    assert mention_at("@") == ""
    assert mention_at("mail me@example") is None  # an @ inside a word is no mention
    assert mention_at("explain @src/app.py and") is None


def test_each_file_mentioned_is_sent_as_a_link_and_an_image_inline(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    text = "compare @src/app.py with @shot.png, and @src/app.py again; not @missing.txt or a@src/app.py"
    found = mentioned(text, str(root))
    assert found == [
        Mention("src/app.py", str(root / "src" / "app.py"), ""),
        Mention("shot.png", str(root / "shot.png"), ""),
    ]
    blocks = prompt_blocks(text, [m.path for m in found], images=True)
    assert blocks[0] == {"type": "text", "text": text}
    link, image = blocks[1:]
    assert link == {
        "type": "resource_link",
        "uri": (root / "src" / "app.py").as_uri(),
        "name": "app.py",
        "mimeType": "text/x-python",
        "size": 12,
    }
    assert image["type"] == "image"
    assert image["mimeType"] == "image/png"
    assert base64.b64decode(image["data"]) == PNG
    no_images = prompt_blocks("look at @shot.png", [str(root / "shot.png")], images=False)
    assert [b["type"] for b in no_images] == ["text", "resource_link"]
    (root / "big.png").write_bytes(PNG + b"\0" * MAX_IMAGE_BYTES)
    assert prompt_blocks("@big.png", [str(root / "big.png")], images=True)[1]["type"] == "resource_link"


def test_a_dragged_file_is_mentioned_quoted_when_its_path_has_spaces(tmp_path: Path) -> None:
    from refagent.client.mentions import dropped

    shot = tmp_path / "Screen Shot 1.png"
    shot.write_bytes(PNG)
    plain = tmp_path / "notes.txt"
    plain.write_text("x\n")
    assert dropped(f"'{shot}'") == f'@"{shot}" '
    assert dropped(str(shot).replace(" ", "\\ ")) == f'@"{shot}" '
    assert dropped(f"  {plain}\n") == f"@{plain} "
    assert dropped("notes.txt") is None  # a relative path is text
    assert dropped(f"{plain}\n{plain}") is None  # two lines: text
    assert dropped(f"{tmp_path}/missing.png") is None
    assert mentioned(f'see @"{shot}" please', str(tmp_path)) == [Mention(str(shot), str(shot), "")]
    elsewhere = tmp_path / "ws"
    elsewhere.mkdir()
    # Dragged from outside the chat's directory: read_file would ask, so the chat asks.
    assert mentioned(f'see @"{shot}" please', str(elsewhere)) == [
        Mention(str(shot), str(shot), f"@{shot} is outside the workspace.")
    ]


def test_a_mention_that_leads_outside_or_to_a_private_file_asks(tmp_path: Path) -> None:
    """What the agent's policy would not let read_file read without asking is never attached by itself:
    a workspace link to a key outside, and a credential at a root that is the home directory."""
    home, outside = tmp_path / "home", tmp_path / "outside"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    outside.mkdir()
    (outside / "key").write_text("PRIVATE KEY\n")
    (home / "deploy.txt").symlink_to(outside / "key")
    (home / "inner.txt").symlink_to(home / "notes.txt")
    (home / "notes.txt").write_text("notes\n")
    policy = RootPolicy(str(home), [], private=[str(home / ".ssh")])
    assert mentioned("see @deploy.txt, @.ssh/id_ed25519 and @inner.txt", str(home), policy) == [
        Mention(
            "deploy.txt", str(outside / "key"), f"@deploy.txt leads to {outside}/key, which is outside the workspace."
        ),
        Mention(
            ".ssh/id_ed25519",
            str(home / ".ssh" / "id_ed25519"),
            "@.ssh/id_ed25519 is private (your credentials, or the agent's own files).",
        ),
        Mention("inner.txt", str(home / "notes.txt"), ""),  # a link within the workspace: as read_file reads it
    ]


def test_the_default_policy_keeps_the_users_credentials_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_rsa").write_text("KEY\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    [found] = mentioned("@~/.ssh/id_rsa", str(tmp_path))
    assert found.asks.endswith("is private (your credentials, or the agent's own files).")
