"""The OpenAI adapter's failures, each said as itself: connection refused, a host name not found (DNS), a TLS
failure, a rejected key named by where it came from (never shown), a 404 for a model the endpoint does not
serve, and a profile without a model. Each is also of the right kind (``model``, ``auth``, ``config``).

No network: connection failures are exception chains built here (classified by
:func:`~refagent.llm.retry.connection_problem`) or raised by a fake transport inside the real
``openai`` client; statuses come from the scripted server on 127.0.0.1, or a closed port there.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest

from refagent import config
from refagent.errors import ModelAuthError, ModelConfigError, ModelError
from refagent.llm.openai_client import OpenAIModel
from refagent.llm.profiles import ModelProfile
from refagent.llm.protocol import ModelRequest, Retrying
from refagent.llm.retry import RetryPolicy, connection_problem
from refagent.testing.openai_server import Fault, ScriptedOpenAIServer, Turn

pytestmark = pytest.mark.anyio

HTTP: Any = vars(openai._exceptions).get("httpx2") or vars(openai._exceptions).get("httpx")
"""The HTTP library the installed ``openai`` uses (``httpx``; ``httpx2`` in its later releases)."""
HI = ModelRequest(messages=[{"role": "user", "content": "hi"}])
FAST = RetryPolicy(attempts=3, base_delay=0.001)
WRONG_KEY = "sk-wrong-0123456789"


def refused() -> BaseException:
    """What the HTTP stack raises for a port nobody listens on: ``ConnectError`` <- ``OSError("All connection
    attempts failed")`` <- the ``ConnectionRefusedError`` of the last address tried."""
    try:
        try:
            raise ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 9)")
        except ConnectionRefusedError:
            raise OSError("All connection attempts failed")  # noqa: B904 (as anyio does: implicit context)
    except OSError as inner:
        return inner


def wrapped(cause: BaseException, text: str | None = None) -> openai.APIConnectionError:
    """``cause`` as the ``openai`` client reports it: ``APIConnectionError`` <- ``ConnectError`` <- ``cause``."""
    connect = HTTP.ConnectError(text if text is not None else str(cause))
    connect.__cause__ = cause
    error = openai.APIConnectionError(request=HTTP.Request("POST", "https://llm.example.com/v1/chat/completions"))
    error.__cause__ = connect
    return error


def cert_failure() -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(
        1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate (_ssl.c:1006)"
    )
    error.verify_message = "self-signed certificate"
    error.verify_code = 18
    return error


# -- classifying a failed connection ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("cause", "what", "transient"),
    [
        (refused(), "connection refused (is the server running?)", True),
        (
            socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
            "its host name was not found (DNS: Name or service not known); check the URL",
            False,
        ),
        (
            socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution"),
            "its host name could not be looked up for now (DNS: Temporary failure in name resolution)",
            True,
        ),
        (cert_failure(), "its TLS certificate could not be verified (self-signed certificate)", False),
        (
            ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)"),
            "TLS failed ([SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006))",
            True,
        ),
        (
            ConnectionResetError(104, "Connection reset by peer"),
            "the connection failed ([Errno 104] Connection reset by peer)",
            True,
        ),
        (
            ExceptionGroup("attempts", [ConnectionRefusedError(111, "refused")]),
            "connection refused (is the server running?)",
            True,
        ),
    ],
    ids=["refused", "dns", "dns-for-now", "tls-certificate", "tls-other", "reset", "group"],
)
def test_a_failed_connection_is_classified_from_its_causes(cause: BaseException, what: str, transient: bool) -> None:
    problem = connection_problem(wrapped(cause))
    assert (problem.what, problem.transient) == (what, transient)


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed", "its TLS certificate could not be verified"),
        ("[Errno -2] Name or service not known", "its host name was not found (DNS); check the URL"),
        ("[Errno 111] Connection refused", "connection refused (is the server running?)"),
    ],
)
def test_only_the_text_is_enough_when_the_types_say_nothing(text: str, what: str) -> None:
    error = openai.APIConnectionError(request=HTTP.Request("GET", "https://llm.example.com/v1/models"))
    error.__cause__ = HTTP.ConnectError(text)
    assert connection_problem(error).what == what


# -- the same, through the real openai client and a fake transport --------------------------------


class Faked(OpenAIModel):
    """The adapter, its ``openai`` client on a transport that answers with ``handler``."""

    def __init__(self, profile: ModelProfile, handler: Callable[[Any], Any]) -> None:
        super().__init__(profile, retry=FAST, sleep=_no_sleep, rand=lambda: 0.0)
        self.handler = handler
        self.calls = 0

    def _new_client(self) -> Any:
        def handle(request: Any) -> Any:
            self.calls += 1
            return self.handler(request)

        http = HTTP.AsyncClient(transport=HTTP.MockTransport(handle))
        return openai.AsyncOpenAI(
            api_key=self.profile.api_key or "none", base_url=self.profile.endpoint, max_retries=0, http_client=http
        )


async def _no_sleep(seconds: float) -> None:
    return None


def raising(cause: BaseException) -> Callable[[Any], Any]:
    def handler(request: Any) -> Any:
        raise HTTP.ConnectError(str(cause), request=request) from cause

    return handler


def profile(**fields: Any) -> ModelProfile:
    values: dict[str, Any] = {"model": "m", "base_url": "https://llm.example.com/v1", "api_key": "k"}
    values.update(fields)
    return ModelProfile("work", "Work", **values)


async def failure(model: OpenAIModel) -> tuple[ModelError, int]:
    """The error the stream ends with, and how many retries it announced."""
    retries = 0
    try:
        async for event in model.stream(HI):
            retries += isinstance(event, Retrying)
    except ModelError as exc:
        return exc, retries
    finally:
        await model.aclose()
    raise AssertionError("the stream did not fail")


async def test_a_host_name_not_found_is_said_and_not_retried() -> None:
    model = Faked(profile(), raising(socket.gaierror(socket.EAI_NONAME, "Name or service not known")))
    error, retries = await failure(model)
    assert type(error) is ModelError
    assert error.kind == "model"
    assert str(error) == (
        "Cannot connect to https://llm.example.com/v1: its host name was not found (DNS: Name or service not "
        "known); check the URL."
    )
    assert (retries, model.calls) == (0, 1)


async def test_a_certificate_that_cannot_be_verified_is_said_and_not_retried() -> None:
    model = Faked(profile(), raising(cert_failure()))
    error, retries = await failure(model)
    assert str(error) == (
        "Cannot connect to https://llm.example.com/v1: its TLS certificate could not be verified "
        "(self-signed certificate)."
    )
    assert (retries, model.calls) == (0, 1)


async def test_a_refused_connection_is_retried_then_said() -> None:
    model = Faked(profile(), raising(ConnectionRefusedError(111, "Connect call failed")))
    error, retries = await failure(model)
    assert str(error) == (
        "Cannot connect to https://llm.example.com/v1: connection refused (is the server running?). "
        "Gave up after 3 attempts (model 'm')."
    )
    assert retries == 2


# -- a profile without a model ----------------------------------------------------------------------


def models_answer(status: int, body: Any) -> Callable[[Any], Any]:
    def handler(request: Any) -> Any:
        assert request.url.path.endswith("/models"), "no chat request without a model"
        return HTTP.Response(status, json=body)

    return handler


async def test_no_model_and_an_endpoint_that_lists_none() -> None:
    error, _ = await failure(Faked(profile(model=""), models_answer(200, {"object": "list", "data": []})))
    assert isinstance(error, ModelConfigError)
    assert error.kind == "config"
    assert str(error) == (
        "The model profile 'work' names no model, and https://llm.example.com/v1/models lists none: "
        "set `model` in its profile, or REFAGENT_MODEL."
    )


async def test_no_model_and_an_endpoint_that_cannot_list_them() -> None:
    body = {"error": {"message": "Not Found", "type": "not_found", "code": 404}}
    error, _ = await failure(Faked(profile(model="", source="/c.toml [profiles.work]"), models_answer(404, body)))
    assert isinstance(error, ModelConfigError)
    assert str(error) == (
        "The model profile 'work' names no model, and https://llm.example.com/v1/models answered 404 (Not Found): "
        "set `model` in /c.toml [profiles.work]."
    )


async def test_no_model_and_a_connection_refused_is_a_connection_failure() -> None:
    with ScriptedOpenAIServer() as server:
        base_url = server.base_url
    model = OpenAIModel(profile(model="", base_url=base_url, api_key=None), retry=FAST)
    error, _ = await failure(model)  # nothing listens on the port any more
    assert type(error) is ModelError
    assert error.kind == "model"
    assert str(error) == f"Cannot connect to {base_url}: connection refused (is the server running?)."
    assert "names no model" not in str(error)


async def test_no_model_and_a_rejected_key_is_the_key() -> None:
    rejects = models_answer(401, {"error": {"message": "Incorrect API key provided.", "code": "invalid_api_key"}})
    model = Faked(profile(model="", api_key_env="WORK_KEY", api_key_from="WORK_KEY"), rejects)
    error, _ = await failure(model)
    assert isinstance(error, ModelAuthError)
    assert error.kind == "auth"
    assert str(error) == (
        "https://llm.example.com/v1/models rejected the key from WORK_KEY (401: Incorrect API key provided.). "
        "Put a valid key there."
    )
    assert model.calls == 1  # the models listing only: no chat request without a model


# -- statuses: a rejected key, an unknown model -----------------------------------------------------


def loaded_profile(tmp_path: Path, server: ScriptedOpenAIServer, toml: str | None, env: dict[str, str]) -> ModelProfile:
    """The active profile as the configuration makes it (file, environment), so its key's origin is real."""
    environment = dict(env)
    if toml is not None:
        path = tmp_path / "config.toml"
        path.write_text(toml.replace("URL", server.base_url), encoding="utf-8")
        environment["REFAGENT_CONFIG"] = str(path)
    return config.load(None, environment).profile


@pytest.mark.parametrize(
    ("toml", "env", "origin"),
    [
        (None, {"OPENAI_BASE_URL": "URL", "OPENAI_API_KEY": WRONG_KEY, "REFAGENT_MODEL": "m"}, "OPENAI_API_KEY"),
        (
            '[profiles.work]\nbase_url = "URL"\nmodel = "m"\napi_key_env = "WORK_KEY"\n',
            {"WORK_KEY": WRONG_KEY},
            "WORK_KEY",
        ),
        (
            f'[profiles.work]\nbase_url = "URL"\nmodel = "m"\napi_key = "{WRONG_KEY}"\napi_key_env = "UNUSED"\n',
            {},
            "`api_key` in {path} [profiles.work]",
        ),
    ],
    ids=["OPENAI_API_KEY", "api_key_env", "api_key"],
)
async def test_a_rejected_key_is_named_by_where_it_came_from_and_never_shown(
    tmp_path: Path, toml: str | None, env: dict[str, str], origin: str
) -> None:
    echoed = Fault.status(401, message=f"Incorrect API key provided: {WRONG_KEY}.")  # as some servers do
    with ScriptedOpenAIServer([Turn(fault=echoed)]) as server:
        env = {k: v.replace("URL", server.base_url) for k, v in env.items()}
        error, _ = await failure(OpenAIModel(loaded_profile(tmp_path, server, toml, env), retry=FAST))
    origin = origin.format(path=tmp_path / "config.toml")
    assert isinstance(error, ModelAuthError)
    assert error.kind == "auth"
    assert str(error) == (
        f"{server.base_url}/chat/completions rejected the key from {origin} "
        "(401: Incorrect API key provided: [the key].). Put a valid key there."
    )
    assert WRONG_KEY not in str(error)
    assert "set OPENAI_API_KEY" not in str(error)


async def test_a_refused_access_names_the_key_and_the_model() -> None:
    with ScriptedOpenAIServer([Turn(fault=Fault.status(403))]) as server:
        error, _ = await failure(OpenAIModel(profile(base_url=server.base_url, api_key_env="WORK_KEY"), retry=FAST))
    assert isinstance(error, ModelAuthError)
    assert str(error) == (
        f"{server.base_url}/chat/completions refused the key from WORK_KEY access (403: You are not allowed to use "
        "this model.): the key may not be allowed to use the model 'm'."
    )


async def test_a_local_endpoint_that_wants_a_key_it_was_not_given() -> None:
    with ScriptedOpenAIServer([Turn(text="x")], api_key="needed") as server:
        error, _ = await failure(OpenAIModel(profile(base_url=server.base_url, api_key=None), retry=FAST))
    assert isinstance(error, ModelAuthError)
    assert "it needs an API key, and the model profile 'work' has none: set the OPENAI_API_KEY" in str(error)


async def test_a_model_the_endpoint_does_not_serve() -> None:
    gone = Fault.status(404, message="The model `nope` does not exist or you do not have access to it.")
    with ScriptedOpenAIServer([Turn(fault=gone)]) as server:
        error, retries = await failure(
            OpenAIModel(profile(model="nope", base_url=server.base_url, source="environment"), retry=FAST)
        )
        asked = len(server.chat_requests)
    assert isinstance(error, ModelConfigError)
    assert error.kind == "config"
    assert str(error) == (
        f"{server.base_url}/chat/completions answered 404 for the model 'nope' (The model `nope` does not exist or "
        f"you do not have access to it.): it serves no such model, or the base URL is wrong. {server.base_url}/models "
        "lists its models; set REFAGENT_MODEL (or --model)."
    )
    assert (retries, asked) == (0, 1)


def test_the_failure_kinds() -> None:
    assert (ModelError.kind, ModelAuthError.kind, ModelConfigError.kind) == ("model", "auth", "config")
