"""``refagent login`` and ``refagent logout``: the questions, what they write, and the real command in a terminal.

Most tests run :class:`~refagent.client.login.Login` in this process, answering from lists, against HTTP
servers on 127.0.0.1 (the scripted OpenAI-compatible server, or :class:`ModelsServer`, which checks keys on
``/v1/models``). A few start ``refagent login`` itself on a pseudo-terminal, as a user runs it: the typing,
the hidden key, Ctrl-C. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import json
import re
import socket
import stat
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any

import pytest

from refagent import config
from refagent.client import login as login_module
from refagent.client.context_window import Window, find_context_window, parse_tokens
from refagent.client.endpoints import (
    Answer,
    LocalServer,
    fetch_models,
    find_local_servers,
    normalize_url,
    suggest_profile_id,
)
from refagent.client.login import Login
from refagent.errors import ConfigError
from refagent.testing.openai_server import ScriptedOpenAIServer
from tests.support.helpers_process import agent_env
from tests.support.terminal import Terminal

RIGHT_KEY = "sk-right-0123456789abcdef"
WRONG_KEY = "sk-wrong-fedcba9876543210"
MODELS = ["beta-model", "alpha-model", "gamma-model"]


class ModelsServer(ThreadingHTTPServer):
    """``GET /v1/models`` on 127.0.0.1 with a key check: the right key gets the list; a wrong one a 401
    that echoes it (as careless servers do); no key gets the list if ``public``, else a 401."""

    daemon_threads = True

    def __init__(
        self,
        key: str = RIGHT_KEY,
        *,
        public: bool = False,
        any_key: bool = False,
        models: list[str] = MODELS,
        entries: dict[str, dict[str, Any]] | None = None,
        routes: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(("127.0.0.1", 0), _ModelsHandler)
        self.key = key
        self.public = public
        self.any_key = any_key
        """Every key gets the list (a server that checks none)."""
        self.models = models
        self.entries = entries or {}
        """More fields of a model's entry in the listing, by id."""
        self.routes = routes or {}
        """Other paths (``GET /props``, ``POST /api/show``) and the JSON each answers, to the right key."""
        self.posted: list[Any] = []
        self.seen: list[str | None] = []
        """The Authorization header of each request."""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self) -> ModelsServer:
        Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


class _ModelsHandler(BaseHTTPRequestHandler):
    server: ModelsServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.server.posted.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0))))
        self.do_GET()

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization")
        self.server.seen.append(auth)
        allowed = auth == f"Bearer {self.server.key}" or (auth is None and self.server.public)
        allowed = allowed or (self.server.any_key and auth is not None)
        if self.path in self.server.routes and allowed:
            self._json(200, self.server.routes[self.path])
        elif self.path != "/v1/models":
            self._json(404, {"error": {"message": f"no route for {self.path}"}})
        elif allowed:
            entries = [{"id": m, "object": "model", **self.server.entries.get(m, {})} for m in self.server.models]
            self._json(200, {"object": "list", "data": entries})
        else:
            sent = (auth or "").removeprefix("Bearer ")
            self._json(401, {"error": {"message": f"Incorrect API key provided: {sent}", "code": "invalid_api_key"}})

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "config" / "refagent" / "config.toml"


class Script:
    """Answers for :class:`Login`, in order; what it said; the prompts it asked (``secret`` marks hidden ones)."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.said: list[str] = []
        self.prompts: list[str] = []

    def ask(self, prompt: str) -> str:
        return self._next(prompt)

    def secret(self, prompt: str) -> str:
        return self._next("(hidden) " + prompt)

    def say(self, text: str) -> None:
        self.said.append(text)

    def _next(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.answers:
            raise EOFError
        return self.answers.pop(0)

    @property
    def text(self) -> str:
        return "\n".join(self.said)

    def login(self, path: Path, *, env: dict[str, str] | None = None, **options: Any) -> Login:
        options.setdefault("local_servers", ())
        return Login(path, ask=self.ask, secret=self.secret, say=self.say, env=env or {}, **options)


def saved(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


# -- the questions, in this process -----------------------------------------------------------------------


def test_a_key_is_not_called_working_where_the_models_are_listed_without_one(path: Path) -> None:
    with ModelsServer(public=True, any_key=True) as server:
        script = Script("3", server.base_url, "1", WRONG_KEY, "32k", "", "")
        script.login(path).run()
    assert "This server lists its models without a key, so the key could not be checked here." in script.text
    assert "The key works." not in script.text
    with ModelsServer() as server:  # refuses a request without a key: so the key was checked
        script = Script("3", server.base_url, RIGHT_KEY, "1", "32k", "", "")
        script.login(path.with_name("other.toml")).run()
    assert "The key works." in script.text
    assert server.seen.count(None) == 1  # the keyless answer of the URL step is used, not asked again


def test_a_url_that_lists_its_models_publicly_model_then_key_then_saved(path: Path) -> None:
    with ModelsServer(public=True) as server:
        script = Script("3", server.base_url, "1", WRONG_KEY, RIGHT_KEY, "32k", "", "")
        assert script.login(path).run() == f"local-{server.server_address[1]}"

    assert script.prompts[0].startswith("Choose 1-3")  # OpenAI, providers, any URL: no local server here
    assert "Choose a model" in script.prompts[2]
    assert script.prompts[3].startswith("(hidden) API key for")
    assert "The endpoint refused this key (HTTP 401: Incorrect API key provided: ***)" in script.text
    assert "The key works." in script.text
    assert WRONG_KEY not in script.text
    assert RIGHT_KEY not in script.text
    profile_id = f"local-{server.server_address[1]}"
    assert saved(path) == {
        "default_profile": profile_id,
        "profiles": {
            profile_id: {
                "base_url": server.base_url,
                "model": "alpha-model",
                "api_key": RIGHT_KEY,
                "context_window": 32768,
            }
        },
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    loaded = config.load(None, {"REFAGENT_CONFIG": str(path)})
    assert (loaded.profile.model, loaded.profile.api_key, loaded.profile.endpoint) == (
        "alpha-model",
        RIGHT_KEY,
        server.base_url,
    )


def test_an_endpoint_that_lists_only_to_a_key_is_asked_for_it_first(path: Path) -> None:
    with ModelsServer() as server:
        url = server.base_url.removesuffix("/v1")  # typed without /v1: found there
        script = Script(url, "", RIGHT_KEY, "gamma-model", "", "", "work")
        assert script.login(path).run() == "work"
    assert "Found it at" in script.text
    assert "It answers, and wants a key." in script.text
    assert "This endpoint wants a key." in script.text  # the empty answer
    assert [p.split(" ")[0] for p in script.prompts[:4]] == ["Choose", "(hidden)", "(hidden)", "Choose"]
    assert saved(path)["profiles"]["work"]["model"] == "gamma-model"


def test_a_local_server_that_answers_needs_no_key(path: Path) -> None:
    with ScriptedOpenAIServer() as server:
        script = Script(server.base_url, "", "", "", "")  # Enter: its model, no key, the window, the name
        script.login(path).run()
    assert "(input hidden; Enter: none)" in script.prompts[2]
    (profile,) = saved(path)["profiles"].values()
    assert profile == {"base_url": server.base_url, "model": "scripted-model"}  # a local endpoint: no api_key


def test_the_servers_found_on_this_machine_are_offered(path: Path) -> None:
    with ModelsServer(public=True) as listing, ModelsServer() as keyed:
        servers = [
            LocalServer("Listing", "listing", listing.server_address[1]),
            LocalServer("Closed", "closed", 9),  # the discard port: refused
            LocalServer("Keyed", "keyed", keyed.server_address[1]),
        ]
        found = find_local_servers(servers, timeout=2)
        assert [(s.profile_id, a.status) for s, a in found] == [("listing", 200), ("keyed", 401)]
        script = Script("", "", "", "")  # Enter: the first server found, its first model, the window, its name
        assert script.login(path, local_servers=servers, probe_timeout=2).run() == "listing"
    assert "No key needed: the server answered without one." in script.text
    assert not any(p.startswith("(hidden)") for p in script.prompts)
    menu = [line for line in script.said if line.startswith("  ")]
    assert menu[:5] == [
        "  1) OpenAI (https://api.openai.com/v1)",
        f"  2) Listing on this machine ({listing.base_url})",
        f"  3) Keyed on this machine ({keyed.base_url}), wants a key",
        "  4) Another provider (Anthropic, Google Gemini, OpenRouter, DeepSeek, Groq, Mistral, xAI)",
        "  5) Any OpenAI-compatible URL",
    ]
    assert saved(path)["profiles"]["listing"] == {"base_url": listing.base_url, "model": "alpha-model"}


def test_the_key_can_live_in_an_environment_variable(path: Path) -> None:
    with ModelsServer() as server:
        script = Script(server.base_url, RIGHT_KEY, "", "", "not a name", "WORK_KEY", "")
        script.login(path, env={"REFAGENT_MODEL": "x"}).run()
    (profile,) = saved(path)["profiles"].values()
    assert profile["api_key_env"] == "WORK_KEY"
    assert "api_key" not in profile
    assert "Set WORK_KEY to the key" in script.text
    assert "A variable's name is" in script.text
    assert "Note: REFAGENT_MODEL is set here" in script.text
    assert RIGHT_KEY not in path.read_text()


def test_an_endpoint_that_does_not_answer_can_be_saved_unchecked(path: Path, tmp_path: Path) -> None:
    url = "http://127.0.0.1:9/v1"  # refused
    script = Script(url, "x", "r", "g", "my-model", RIGHT_KEY, "r", "s", "", "", "")
    script.login(path).run()
    assert script.text.count("the connection was refused") == 4  # twice before going on, twice for the key
    assert "Type one of r, c, g." in script.text
    (profile,) = saved(path)["profiles"].values()
    assert profile == {"base_url": url, "model": "my-model", "api_key": RIGHT_KEY}


def test_openai_is_asked_with_the_key_first(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No request goes to api.openai.com here: the check is replaced by one that knows the right key."""
    asked: list[tuple[str, str | None]] = []

    def fake(base_url: str, key: str | None = None, *, timeout: float = 0, anthropic: bool = False) -> Answer:
        asked.append((base_url, key))
        if key == RIGHT_KEY:
            return Answer(200, [f"m{i:03}" for i in range(200)] + ["gpt-5-mini"])
        return Answer(401, problem="HTTP 401: Incorrect API key provided: sk-wr***10")

    monkeypatch.setattr(login_module, "fetch_models", fake)
    script = Script("1", WRONG_KEY, RIGHT_KEY, "?", "999", "", "", "")
    assert script.login(path).run() == "openai"
    assert [key for _, key in asked] == [WRONG_KEY, RIGHT_KEY]  # OpenAI wants a key: no keyless probe
    assert "The endpoint has 201 models." in script.text
    assert "  201) gpt-5-mini" in script.said  # "?" lists them, in the order fetch_models gives
    assert "There is no 999." in script.text
    profile = saved(path)["profiles"]["openai"]
    assert profile["model"] == "gpt-5-mini"  # Enter: the default model
    assert profile["base_url"] == "https://api.openai.com/v1"


class AnthropicModels(ThreadingHTTPServer):
    """``GET /v1/models`` as Anthropic answers it: the key in ``x-api-key``, with ``anthropic-version``."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _AnthropicHandler)
        self.seen: list[dict[str, str]] = []

    def __enter__(self) -> AnthropicModels:
        Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()


class _AnthropicHandler(BaseHTTPRequestHandler):
    server: AnthropicModels

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.seen.append({k.lower(): v for k, v in self.headers.items()})
        right = self.headers.get("x-api-key") == RIGHT_KEY and self.headers.get("anthropic-version")
        status, payload = (
            (200, {"data": [{"id": "claude-haiku-4-5", "type": "model"}, {"id": "claude-sonnet-4-5", "type": "model"}]})
            if self.path == "/v1/models" and right
            else (401, {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}})
        )
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_a_provider_by_name_is_asked_its_own_way_and_saved_with_its_api(path: Path) -> None:
    with AnthropicModels() as server:
        root = f"http://127.0.0.1:{server.server_address[1]}"
        env = {"ANTHROPIC_BASE_URL": root}
        script = Script("2", "1", WRONG_KEY, RIGHT_KEY, "", "ANTHROPIC_API_KEY", "")
        assert script.login(path, env=env).run() == "anthropic"
    assert "  1) Anthropic (" + root + ")" in script.said
    assert server.seen[-1]["x-api-key"] == RIGHT_KEY
    assert "authorization" not in server.seen[-1]  # its key goes in its own header only
    assert any("usually ANTHROPIC_API_KEY" in prompt for prompt in script.prompts)
    profile = saved(path)["profiles"]["anthropic"]
    assert profile == {  # its default model; no window asked: refagent knows Anthropic's models
        "base_url": root,
        "model": "claude-sonnet-4-5",
        "client": "anthropic",
        "api_key_env": "ANTHROPIC_API_KEY",
    }


def test_logging_in_again_keeps_the_rest_of_the_file(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_text(
        "# my settings\n"
        'default_profile = "work"\n'
        "max_requests = 12\n"
        'tools = ["outline:Outline"]\n\n'
        "[retry]\nattempts = 2\n\n"
        "[profiles.work]\n"
        'base_url = "https://llm.example.com/v1"\napi_key_env = "WORK_KEY"\nmodel = "big"\n\n'
        "[profiles.mine]  # the local one\n"
        'base_url = "http://old.example/v1"\nmodel = "old"\nname = "Mine"\ncontext_window = 4096\n'
    )
    path.chmod(0o644)
    with ModelsServer(public=True) as server:
        script = Script(server.base_url, "2", RIGHT_KEY, "", "", "mine", "y")
        script.login(path).run()
    assert "The profile 'mine' exists" in script.text
    data = saved(path)
    assert data["default_profile"] == "mine"
    assert data["max_requests"] == 12
    assert data["tools"] == ["outline:Outline"]
    assert data["retry"] == {"attempts": 2}
    assert data["profiles"]["work"] == {
        "base_url": "https://llm.example.com/v1",
        "api_key_env": "WORK_KEY",
        "model": "big",
    }
    assert data["profiles"]["mine"] == {
        "base_url": server.base_url,
        "model": "beta-model",
        "name": "Mine",  # kept; the old model's context window is not
        "api_key": RIGHT_KEY,
    }
    text = path.read_text()
    assert text.startswith("# my settings\n")
    assert "[profiles.mine]  # the local one\n" in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_not_the_default_when_the_user_says_no(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_text('[profiles.work]\nmodel = "big"\napi_key_env = "W"\n')
    with ScriptedOpenAIServer() as server:
        script = Script(server.base_url, "", "", "", "", "n")
        script.login(path).run()
    data = saved(path)
    assert "default_profile" not in data
    assert list(data["profiles"]) == ["work", f"local-{server.port}"]
    assert "Saved the profile" in script.text


def test_a_broken_config_file_stops_login_before_any_question(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_text("this is = = not toml\n")
    script = Script()
    with pytest.raises(ConfigError, match="not valid TOML"):
        script.login(path).run()
    assert script.prompts == []


def test_fetch_models_reports_what_went_wrong_without_the_key() -> None:
    with ModelsServer() as server:
        assert fetch_models(server.base_url, RIGHT_KEY).models == sorted(MODELS)
        wrong = fetch_models(server.base_url, WRONG_KEY)
        assert wrong.refused
        assert WRONG_KEY not in wrong.problem
        assert "***" in wrong.problem
        missing = fetch_models(server.base_url + "/nowhere")
        assert (missing.status, missing.problem) == (404, "HTTP 404: no route for /v1/nowhere/models")
    with socket.create_server(("127.0.0.1", 0)) as other:  # something else listens there: not HTTP
        port = other.getsockname()[1]
        Thread(target=lambda: other.accept()[0].sendall(b"SSH-2.0-OpenSSH_9.6\r\n"), daemon=True).start()
        garbled = fetch_models(f"http://127.0.0.1:{port}/v1", timeout=5)
    assert garbled.status is None
    assert garbled.problem == "it does not answer in HTTP (BadStatusLine)"
    refused = fetch_models("http://127.0.0.1:9/v1", RIGHT_KEY)
    assert refused.status is None
    assert "refused" in refused.problem


@pytest.mark.parametrize(
    ("typed", "url"),
    [
        ("localhost:11434/v1", "http://localhost:11434/v1"),
        ("api.example.com/v1/", "https://api.example.com/v1"),
        ("https://api.example.com/v1/models", "https://api.example.com/v1"),
        ("http://127.0.0.1:8080/v1/chat/completions", "http://127.0.0.1:8080/v1"),
        ("ftp://example.com", None),
        ("http://host:port", None),
        ("not a url", None),
        ("", None),
    ],
)
def test_normalize_url(typed: str, url: str | None) -> None:
    assert normalize_url(typed) == url


@pytest.mark.parametrize(
    ("url", "profile_id"),
    [
        ("https://api.openai.com/v1", "openai"),
        ("http://127.0.0.1:11434/v1", "ollama"),
        ("http://localhost:4000/v1", "local-4000"),
        ("https://api.groq.com/openai/v1", "groq"),
        ("https://openrouter.ai/api/v1", "openrouter"),
        ("https://10.1.2.3/v1", "custom"),
    ],
)
def test_suggest_profile_id(url: str, profile_id: str) -> None:
    assert suggest_profile_id(url) == profile_id


# -- logout -----------------------------------------------------------------------------------------------


def test_logout_forgets_the_stored_keys_and_says_which(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path.parent.mkdir(parents=True)
    path.write_text(
        'default_profile = "a"\n\n[profiles.a]\nmodel = "m"\napi_key = "sk-a-secret"\n\n'
        '[profiles.b]\nmodel = "n"\napi_key_env = "B_KEY"\n\n[profiles.c]\nmodel = "o"\napi_key = ""\n'
    )
    assert login_module.logout_main(["--config", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""  # stdout is the protocol's, in every refagent command
    out = captured.err
    assert "Removed the stored key of the profile 'a' from" in out
    assert "sk-a-secret" not in out
    assert saved(path) == {
        "default_profile": "a",
        "profiles": {
            "a": {"model": "m"},
            "b": {"model": "n", "api_key_env": "B_KEY"},
            "c": {"model": "o", "api_key": ""},
        },
    }
    assert login_module.logout_main(["--config", str(path)]) == 0
    assert "No key is stored in" in capsys.readouterr().err


def test_logout_without_a_file(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert login_module.logout_main(["--config", str(path)]) == 0
    assert "There is no config file at" in capsys.readouterr().err
    assert not path.exists()


# -- the real command, in a terminal ---------------------------------------------------------------------


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Any]:
    started: list[Terminal] = []

    def start(*args: str) -> Terminal:
        env = agent_env(tmp_path / "home", PYTHONDONTWRITEBYTECODE="1", TERM="dumb")
        started.append(Terminal(["login", *args], env, tmp_path / "stderr.txt"))
        return started[-1]

    yield start
    for term in started:
        term.kill()


def menu_number(term: Terminal, label: str) -> str:
    """The number of ``label`` in the endpoint menu (the servers running on this machine come before it)."""
    return term.expect(rf"(\d+)\) {re.escape(label)}").group(1)


@pytest.mark.slow
def test_login_in_a_terminal(terminal: Any, tmp_path: Path) -> None:
    """The whole flow as a user types it: any URL, a model, a wrong key, the right one; the default file."""
    home = tmp_path / "home"
    with ModelsServer(public=True) as server:
        term = terminal()
        number = menu_number(term, "Any OpenAI-compatible URL")
        term.expect(r"or type a URL \[Enter: \d\]: ")
        term.type(number + "\r")
        term.expect(r"The endpoint's URL .*: ")
        term.type(server.base_url + "\r")
        term.expect(r"It answers: 3 models\.")
        term.expect(r"  1\) alpha-model")
        term.expect(r"Choose a model: a number or a name \[Enter: alpha-model\]: ")
        term.type("2\r")
        term.expect(r"API key for .*\(input hidden; Enter: none\): ")
        term.type(WRONG_KEY + "\r")
        term.expect(r"The endpoint refused this key \(HTTP 401: Incorrect API key provided: \*\*\*\)")
        term.expect(r"API key for .*: ")
        term.type(RIGHT_KEY + "\r")
        term.expect(r"The key works\.")
        term.expect(r"The model's context window in tokens, e\.g\. 32k \[Enter: 128,000, the default\]: ")
        term.type("\r")
        term.expect(r"Environment variable \[Enter: keep it in the file\]: ")
        term.type("\r")
        term.expect(r"Name of the profile \[Enter: local-\d+\]: ")
        term.type("mine\r")
        term.expect(r"Saved the default profile 'mine' \(beta-model at http://127\.0\.0\.1:\d+/v1\)")
        code = term.wait()
    stderr = term.stderr.read_text()
    assert code == 0, term.screen + stderr
    for key in (RIGHT_KEY, WRONG_KEY):
        assert key not in term.screen
        assert key not in stderr
    # The listing without a key, the wrong key, the right one; then the context window's questions, with it.
    assert server.seen[:3] == [None, f"Bearer {WRONG_KEY}", f"Bearer {RIGHT_KEY}"]
    assert set(server.seen[3:]) == {f"Bearer {RIGHT_KEY}"}

    path = home / ".config" / "refagent" / "config.toml"  # XDG_CONFIG_HOME: the default file
    assert saved(path) == {
        "default_profile": "mine",
        "profiles": {"mine": {"base_url": server.base_url, "model": "beta-model", "api_key": RIGHT_KEY}},
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700


@pytest.mark.slow
@pytest.mark.parametrize("where", ["menu", "key"])
@pytest.mark.parametrize("keys", ["\x03", "\x04"], ids=["ctrl-c", "ctrl-d"])
def test_interrupting_login_saves_nothing_and_shows_no_traceback(
    terminal: Any, tmp_path: Path, where: str, keys: str
) -> None:
    path = tmp_path / "config.toml"
    with ModelsServer() as server:
        term = terminal("--config", str(path))
        term.expect(r"or type a URL \[Enter: \d\]: ")
        if where == "key":
            term.type(server.base_url + "\r")
            term.expect(r"API key for .*\(input hidden\): ")
        # As a person would, after the prompt is up: a signal in the microseconds between the prompt and
        # the read that waits for the answer is lost in CPython's readline (it blocks before checking).
        time.sleep(0.2)
        term.type(keys)
        code = term.wait()
    stderr = term.stderr.read_text()
    assert code == 130, term.screen + stderr
    assert stderr.strip() == "refagent login: cancelled, nothing was saved."
    assert "Traceback" not in term.screen + stderr
    assert not path.exists()


def test_login_wants_a_terminal(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "refagent", "login", "--config", str(tmp_path / "c.toml")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=agent_env(tmp_path / "home"),
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert "run it in a terminal" in done.stderr


# -- the context window ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "routes", "tokens", "source"),
    [
        ({"beta-model": {"max_model_len": 32768}}, {}, 32768, "its model list (max_model_len)"),  # vLLM
        ({}, {"/props": {"default_generation_settings": {"n_ctx": 8192}}}, 8192, "llama.cpp's /props (n_ctx)"),
        (
            {},
            {"/api/v0/models/beta-model": {"max_context_length": 131072, "loaded_context_length": 16384}},
            16384,
            "LM Studio (loaded_context_length)",
        ),
        ({}, {"/api/show": {"parameters": "temperature 0.2\nnum_ctx 65536"}}, 65536, "Ollama (the model's num_ctx)"),
    ],
    ids=["vllm", "llama.cpp", "lm-studio", "ollama"],
)
def test_the_context_window_the_server_says_is_saved_without_a_question(
    path: Path, entries: dict[str, Any], routes: dict[str, Any], tokens: int, source: str
) -> None:
    with ModelsServer(public=True, entries=entries, routes=routes) as server:
        script = Script(server.base_url, "2", "", "", "")  # the URL, beta-model, no key, the name, default
        script.login(path).run()
    assert f"Context window: {tokens:,} tokens (from {source})." in script.text
    assert not any("context window" in prompt for prompt in script.prompts)
    (profile,) = saved(path)["profiles"].values()
    assert profile["context_window"] == tokens
    assert server.posted in ([], [{"model": "beta-model"}])


def test_ollama_without_num_ctx_is_asked_with_the_trained_length_as_a_hint(path: Path) -> None:
    """Ollama runs a model with its own default window unless the model sets num_ctx: not found, asked."""
    routes = {"/api/show": {"parameters": "stop <eos>", "model_info": {"llama.context_length": 131072}}}
    with ModelsServer(public=True, routes=routes) as server:
        script = Script(server.base_url, "1", "", "not a number", "1m", "", "")
        script.login(path).run()
    assert "Note: the model was trained for 131,072 tokens, but Ollama runs it with its own default" in script.text
    assert "A number of tokens, such as 32768 or 32k." in script.text
    (profile,) = saved(path)["profiles"].values()
    assert profile["context_window"] == 1024 * 1024


def test_what_a_server_says_of_its_window_is_believed_only_when_it_is_a_window() -> None:
    bogus = {"beta-model": {"max_model_len": True, "context_length": "32768", "context_window": 10**12}}
    with ModelsServer(public=True, entries=bogus) as server:
        assert find_context_window(server.base_url, "beta-model") == Window(None)
    assert [parse_tokens(t) for t in ("32768", "32,768", "32k", " 8K ", "1m", "0", "12.5k", "lots", "")] == [
        32768,
        32768,
        32768,
        8192,
        1048576,
        None,
        None,
        None,
        None,
    ]
