"""Sign-in through the in-memory editor, with settings made as ``refagent --config PATH`` makes them
(:func:`refagent.cli.load_settings`): the ``agent`` method whenever there is a config file path or a configured
profile; the ``terminal`` method (``args: ["login"]``) only for a client that sets
``clientCapabilities.auth.terminal: true`` (or the older ``_meta["terminal-auth"]: true``); ``auth.logout``
whenever there is a config file; ``logout`` forgets the keys stored in the file and reads it again, so a new
session needs a key (``-32000``) until the user signs in again; ``authenticate`` with no usable model says
so (``-32000``); and ``refagent <its options> login``, as an editor's terminal sign-in runs it, starts the
login with the config file those options name. Prompts go to the scripted OpenAI-compatible server on
127.0.0.1, which checks the key."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from refagent import cli, config
from refagent.acp.errors import RequestError
from refagent.client import login as login_module
from refagent.llm.profiles import ModelProfile
from refagent.llm.scripted import ScriptedModel, text
from refagent.persistence.store import SessionStore
from refagent.settings import Settings
from refagent.testing.memory import Editor, connect
from refagent.testing.openai_server import ScriptedOpenAIServer, Turn

pytestmark = pytest.mark.anyio

KEY = "sk-stored-0123456789"
TERMINAL = {
    "type": "terminal",
    "id": "login",
    "name": "Set up a model",
    "description": "Choose an endpoint and a model and enter a key, in a terminal (refagent login).",
    "args": ["login"],
}


@pytest.fixture(autouse=True)
def no_model_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``load_settings`` reads the environment: none of the runner's model settings leak in."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "REFAGENT_MODEL", "REFAGENT_PROFILE", "REFAGENT_CONFIG"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(fallback=Turn(text="signed in"), api_key=KEY) as running:
        yield running


@pytest.fixture
def path() -> Path:
    """The default config file (``XDG_CONFIG_HOME`` is the test's: ``isolated_user_dirs``); not there yet."""
    default = config.default_config_path()
    assert default is not None
    assert not Path(default).exists()
    return Path(default)


def write(path: Path, text: str) -> None:
    """Write the config file (as ``refagent login`` or the user would), making its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


def keyed_config(server: ScriptedOpenAIServer, *, key: str | None = KEY) -> str:
    """A profile on the scripted server that needs a key (``needs_key``: it is local), with ``key`` stored."""
    stored = f'api_key = "{key}"  # stored by refagent login\n' if key is not None else ""
    return (
        "# my settings\n"
        'default_profile = "work"\n\n'
        "[profiles.work]\n"
        f'base_url = "{server.base_url}"\n'
        'model = "work-model"\n'
        "needs_key = true\n" + stored
    )


def from_file(path: Path, tmp_path: Path) -> Settings:
    """What ``refagent`` runs with when its config file is ``path`` (sessions saved under ``tmp_path``): the
    default file, or one named with ``--config``."""
    args = [] if str(path) == config.default_config_path() else ["--config", str(path)]
    settings = cli.load_settings(cli.build_parser().parse_args(args))
    return dataclasses.replace(settings, store=lambda: SessionStore(tmp_path / "sessions"))


@asynccontextmanager
async def agent(settings: Settings, check: Any) -> AsyncIterator[Editor]:
    async with connect(settings, check=check) as editor:
        yield editor


async def error_of(editor: Editor, method: str, params: dict[str, Any]) -> RequestError:
    with pytest.raises(RequestError) as caught:
        await editor.request(method, params)
    return caught.value


async def prompt(editor: Editor, sid: str, text: str) -> dict[str, Any]:
    return await editor.prompt(sid, text)


# -- what is advertised ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "capabilities",
    [
        None,
        {},
        {"auth": {}},
        {"auth": {"terminal": False}},
        {"auth": {"terminal": "true"}},
        {"_meta": {"terminal-auth": False}},
        {"_meta": {"terminal-auth": "yes"}},
        {"auth": None, "_meta": None},
    ],
)
async def test_a_config_file_offers_the_agent_method_and_logout_but_no_terminal(
    path: Path, tmp_path: Path, check: Any, capabilities: dict[str, Any] | None
) -> None:
    async with agent(from_file(path, tmp_path), check) as editor:  # the file does not exist yet
        result = await editor.initialize(capabilities)
    [method] = result["authMethods"]
    assert method["id"] == "api-key"
    assert "type" not in method  # the agent method
    assert "refagent login" in method["description"]
    assert result["agentCapabilities"]["auth"] == {"logout": {}, "status": {}}


@pytest.mark.parametrize("capabilities", [{"auth": {"terminal": True}}, {"_meta": {"terminal-auth": True}}])
async def test_a_client_that_runs_terminals_for_sign_in_is_offered_login(
    path: Path, tmp_path: Path, server: ScriptedOpenAIServer, check: Any, capabilities: dict[str, Any]
) -> None:
    write(path, keyed_config(server))
    async with agent(from_file(path, tmp_path), check) as editor:
        result = await editor.initialize(capabilities)
    agent_method, terminal = result["authMethods"]
    assert agent_method["id"] == "api-key"
    assert terminal == TERMINAL


@pytest.mark.parametrize("capabilities", [None, {"auth": {"terminal": True}}])
async def test_no_configuration_to_sign_in_to_offers_nothing(check: Any, capabilities: dict[str, Any] | None) -> None:
    """The built-in model and no config file (tests, ``--demo``): no method, no logout."""
    async with agent(Settings(), check) as editor:
        result = await editor.initialize(capabilities)
        error = await error_of(editor, "logout", {})
    assert result["authMethods"] == []
    assert result["agentCapabilities"]["auth"] == {"status": {}}  # no logout: nothing to forget
    assert error.code == -32601


async def test_a_configured_profile_without_a_file_offers_only_the_agent_method(check: Any) -> None:
    profile = ModelProfile(id="work", name="Work", base_url="https://models.example.com/v1", api_key_env="WORK_KEY")
    async with agent(Settings(profiles=[profile]), check) as editor:
        result = await editor.initialize({"auth": {"terminal": True}})
        error = await error_of(editor, "logout", {})
    [method] = result["authMethods"]
    assert method["id"] == "api-key"
    assert "WORK_KEY" in method["description"]
    assert result["agentCapabilities"]["auth"] == {"status": {}}  # no file: nothing to forget
    assert error.code == -32601


# -- authenticate ------------------------------------------------------------------------------------


async def test_authenticate_with_no_model_set_up_says_how(
    path: Path, tmp_path: Path, server: ScriptedOpenAIServer, check: Any
) -> None:
    async with agent(from_file(path, tmp_path), check) as editor:
        await editor.initialize()
        error = await error_of(editor, "authenticate", {"methodId": "api-key"})
        assert error.code == -32000
        assert error.message.startswith("No model is set up yet: run `refagent login` in a terminal")
        # the user runs refagent login meanwhile (here: writes what it would), and signs in again
        write(path, keyed_config(server))
        assert await editor.request("authenticate", {"methodId": "api-key"}) == {}
        sid = await editor.new_session(str(tmp_path))
        assert (await prompt(editor, sid, "hi"))["stopReason"] == "end_turn"
        assert editor.text(sid) == "signed in"
    assert server.chat_requests[-1].headers["authorization"] == f"Bearer {KEY}"


async def test_authenticate_refuses_other_methods(path: Path, tmp_path: Path, check: Any) -> None:
    async with agent(from_file(path, tmp_path), check) as editor:
        await editor.initialize({"auth": {"terminal": True}})
        errors = [await error_of(editor, "authenticate", {"methodId": m}) for m in ("login", "oauth")]
        errors.append(await error_of(editor, "authenticate", {}))
    assert [e.code for e in errors] == [-32602, -32602, -32602]


async def test_authenticate_with_a_broken_file_says_what_is_wrong(path: Path, tmp_path: Path, check: Any) -> None:
    write(path, "[profiles.work\n")
    async with agent(from_file(path, tmp_path), check) as editor:
        await editor.initialize()
        error = await error_of(editor, "authenticate", {"methodId": "api-key"})
    assert error.code == -32000
    assert "The configuration could not be read again" in error.message
    assert "not valid TOML" in error.message


# -- logout ------------------------------------------------------------------------------------------


async def test_logout_forgets_the_stored_keys_and_a_new_session_needs_one(
    path: Path, tmp_path: Path, server: ScriptedOpenAIServer, check: Any
) -> None:
    write(path, keyed_config(server))
    async with agent(from_file(path, tmp_path), check) as editor:
        await editor.initialize()
        open_before = await editor.new_session(str(tmp_path))
        assert (await prompt(editor, open_before, "hi"))["stopReason"] == "end_turn"

        assert await editor.request("logout", {}) == {}
        assert read(path) == keyed_config(server, key=None)  # the key gone, the rest as it was
        error = await error_of(editor, "session/new", {"cwd": str(tmp_path), "mcpServers": []})
        assert error.code == -32000
        assert "needs an API key" in error.message
        assert (await error_of(editor, "authenticate", {"methodId": "api-key"})).code == -32000
        # a session opened before keeps the model client it has
        assert (await prompt(editor, open_before, "still there?"))["stopReason"] == "end_turn"

        write(path, keyed_config(server))  # signed in again
        assert await editor.request("authenticate", {"methodId": "api-key"}) == {}
        sid = await editor.new_session(str(tmp_path))
        assert (await prompt(editor, sid, "back"))["stopReason"] == "end_turn"
    assert [r.headers["authorization"] for r in server.chat_requests] == [f"Bearer {KEY}"] * 3


async def test_logout_keeps_a_key_from_the_environment(
    path: Path, tmp_path: Path, server: ScriptedOpenAIServer, check: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORK_KEY", KEY)
    write(path, keyed_config(server, key=None) + 'api_key_env = "WORK_KEY"\n')
    before = read(path)
    async with agent(from_file(path, tmp_path), check) as editor:
        await editor.initialize()
        assert await editor.request("logout", {}) == {}
        sid = await editor.new_session(str(tmp_path))
        assert (await prompt(editor, sid, "hi"))["stopReason"] == "end_turn"
    assert read(path) == before  # nothing stored, nothing written


async def test_logout_without_a_file_is_fine(path: Path, tmp_path: Path, check: Any) -> None:
    async with agent(from_file(path, tmp_path), check) as editor:
        await editor.initialize()
        assert await editor.request("logout", {}) == {}
    assert read(path) is None


async def test_logout_of_a_file_broken_meanwhile_is_an_internal_error(
    path: Path, tmp_path: Path, server: ScriptedOpenAIServer, check: Any
) -> None:
    write(path, keyed_config(server))
    async with agent(from_file(path, tmp_path), check) as editor:
        await editor.initialize()
        write(path, "[profiles.work\n" + keyed_config(server))
        error = await error_of(editor, "logout", {})
    assert error.code == -32603
    assert error.message.startswith("Could not forget the stored keys: ")
    assert KEY not in error.message


async def test_logout_keeps_every_other_profile_setting(
    path: Path, tmp_path: Path, server: ScriptedOpenAIServer, check: Any
) -> None:
    local = '[profiles.local]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\napi_key = ""\n'
    local += 'reasoning_effort = ["low"]\n'
    write(path, keyed_config(server) + "\n" + local)
    async with agent(from_file(path, tmp_path), check) as editor:
        await editor.initialize()
        assert await editor.request("logout", {}) == {}
    saved = tomllib.loads(read(path) or "")
    assert "api_key" not in saved["profiles"]["work"]
    assert saved["profiles"]["local"] == {
        "base_url": "http://127.0.0.1:9/v1",
        "model": "m",
        "api_key": "",  # "no key needed" is not a key
        "reasoning_effort": ["low"],
    }


# -- the editor's terminal sign-in: the agent's command line, then "login" -----------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["login"], []),
        (["--log-file", "agent.log", "login"], []),
        (["--log-level", "debug", "--config", "work.toml", "login"], ["--config", "work.toml"]),
        (["--config=work.toml", "--profile", "x", "login"], ["--config", "work.toml"]),
    ],
)
def test_login_appended_to_the_agents_command_line_starts_the_login(
    argv: list[str], expected: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[list[str]] = []

    def login_main(args: list[str]) -> int:
        started.append(list(args))
        return 0

    monkeypatch.setattr(login_module, "main", login_main)
    assert cli.main(argv) == 0
    assert started == [expected]


# -- the model clients a sign-in replaces ----------------------------------------------------------


WORK = ModelProfile(id="work", name="Work", base_url="http://127.0.0.1:9/v1", model="m")


class Closing(ScriptedModel):
    """A scripted model that says when it is closed (as the OpenAI adapter closes its connection pool)."""

    def __init__(self, name: str, closed: list[str]) -> None:
        super().__init__(fallback=lambda request: text(name))
        self.name = name
        self.closed = closed

    async def aclose(self) -> None:
        self.closed.append(self.name)


async def test_the_clients_a_sign_in_replaces_are_closed_when_the_agent_exits(tmp_path: Path, check: Any) -> None:
    closed: list[str] = []
    made: list[Closing] = []

    def make(profile: ModelProfile) -> Closing:
        made.append(Closing(f"client {len(made) + 1}", closed))
        return made[-1]

    def reload() -> Settings:
        return Settings(profiles=[WORK], make_model=make, reload=reload, store=None)

    async with agent(reload(), check) as editor:
        await editor.initialize()
        sid = await editor.new_session(str(tmp_path))
        await prompt(editor, sid, "hi")
        assert await editor.request("authenticate", {"methodId": "api-key"}) == {}  # the pool starts again
        await prompt(editor, sid, "again")
        assert closed == []  # a turn may still be streaming from the first one
        said = editor.text(sid)
    assert said == "client 1client 2"
    assert sorted(closed) == ["client 1", "client 2"]


# -- auth/status_update (unstable) -------------------------------------------------------------------


async def status_updates(editor: Editor, count: int) -> list[dict[str, Any]]:
    """The ``auth/status_update`` notifications, once there are ``count`` (sent after a response)."""
    with anyio.fail_after(5):
        while True:
            told = [n["params"] for n in editor.client.notifications if n["method"] == "auth/status_update"]
            if len(told) >= count:
                return told
            await anyio.sleep(0.005)


async def test_a_change_of_sign_in_status_is_told_once(
    path: Path, tmp_path: Path, server: ScriptedOpenAIServer, check: Any
) -> None:
    """After logout, and after signing in again: ``auth/status_update`` with what ``auth/status`` would
    answer, only when it differs from what the client last heard (at initialize, or asking): nothing for
    an ``authenticate`` that changes nothing, nor for a second logout."""
    write(path, keyed_config(server))
    async with agent(from_file(path, tmp_path), check) as editor:
        await editor.initialize()
        assert (await editor.request("auth/status", {}))["state"] == "authenticated"
        assert await editor.request("authenticate", {"methodId": "api-key"}) == {}  # nothing changed

        await editor.request("logout", {})
        [signed_out] = await status_updates(editor, 1)
        assert signed_out["state"] == "unauthenticated"
        assert [account["active"] for account in signed_out["accounts"]] == [True]
        assert await editor.request("auth/status", {}) == signed_out
        await editor.request("logout", {})  # again: still signed out, nothing to tell

        write(path, keyed_config(server))
        await editor.request("authenticate", {"methodId": "api-key"})
        assert await status_updates(editor, 2) == [signed_out, {**signed_out, "state": "authenticated"}]
