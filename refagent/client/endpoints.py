"""The endpoints ``refagent login`` offers and how it asks them: ``GET {base_url}/models``.

:func:`fetch_models` is :mod:`urllib` (the ``openai`` package takes most of a second to import, and login
should start at once), with no proxy for this machine and no redirects: a redirect is shown, not followed,
because the key would go along to the new host. What it reports for the user (:attr:`Answer.problem`) has
the key blanked out and its control characters made visible (a terminal would obey them), whatever the
server sent.

:func:`find_local_servers` asks the usual ports of the model servers people run on their own machine
(:data:`LOCAL_SERVERS`) all at once, with a short timeout: a closed port answers at once, and only those
that answer ``/v1/models`` (or want a key for it) are offered.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import re
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from email.message import Message
from typing import IO
from urllib.parse import urlsplit

from refagent import __version__
from refagent.acp.text import one_line
from refagent.llm.profiles import OPENAI_BASE_URL, SCRIPTED, is_local

PROBE_TIMEOUT = 0.5
"""Seconds a server on this machine may take to answer (a closed port answers at once)."""
CHECK_TIMEOUT = 15.0
"""Seconds the chosen endpoint may take to answer."""
MAX_BODY = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class LocalServer:
    """A model server that usually listens on this port."""

    label: str
    profile_id: str
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


LOCAL_SERVERS = (
    LocalServer("Ollama", "ollama", 11434),
    LocalServer("LM Studio", "lmstudio", 1234),
    LocalServer("llama.cpp", "llamacpp", 8080),
    LocalServer("vLLM", "vllm", 8000),
)


@dataclass(frozen=True, slots=True)
class Answer:
    """What ``GET {base_url}/models`` got."""

    status: int | None = None
    """The HTTP status; ``None``: no HTTP answer (``problem`` says why) or none asked for."""
    models: list[str] | None = None
    """The model ids, when the answer was a model list."""
    problem: str = ""
    """What went wrong, in a phrase for the user (never with the key in it)."""

    @property
    def listed(self) -> bool:
        return self.status == 200 and self.models is not None

    @property
    def refused(self) -> bool:
        return self.status in (401, 403)


@dataclass(frozen=True, slots=True)
class Endpoint:
    base_url: str
    profile_id: str
    """The profile id suggested for it."""
    found: bool = False
    """Found on this machine by :func:`find_local_servers` (not typed)."""
    client: str | None = None
    """The kind of model client to write in the profile (a provider's API); None: the endpoint's default."""
    key_env: str | None = None
    """The variable the provider's key is usually in (offered when asking where the key lives)."""
    default_model: str = ""
    """The provider's suggested model."""
    known: bool = False
    """A provider refagent knows the models of (their context windows come from its data file)."""

    @property
    def anthropic(self) -> bool:
        return self.client == "anthropic"

    @property
    def local(self) -> bool:
        return is_local(self.base_url)

    @property
    def openai(self) -> bool:
        return (urlsplit(self.base_url).hostname or "").lower() == "api.openai.com"


OPENAI = Endpoint(OPENAI_BASE_URL, "openai")


# -- HTTP ---------------------------------------------------------------------------------------------


class NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer (3xx) to show, not followed: the key would go along to the new host."""

    def redirect_request(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: Message, newurl: str
    ) -> urllib.request.Request | None:
        return None


ANTHROPIC_VERSION = "2023-06-01"
"""The Messages API version header refagent sends (as its Anthropic client does)."""


def fetch_models(
    base_url: str, key: str | None = None, *, timeout: float = CHECK_TIMEOUT, anthropic: bool = False
) -> Answer:
    """``GET {base_url}/models``, with ``key`` as the bearer token if there is one; ``anthropic``: Anthropic's
    way, ``GET {base_url}/v1/models`` with the key in ``x-api-key`` (its base URL has no ``/v1``)."""
    headers = {"Accept": "application/json", "User-Agent": f"refagent/{__version__} (login)"}
    if anthropic:
        base_url = base_url.rstrip("/").removesuffix("/v1") + "/v1"
        headers["anthropic-version"] = ANTHROPIC_VERSION
        if key:
            headers["x-api-key"] = key
    elif key:
        headers["Authorization"] = f"Bearer {key}"
    handlers: list[urllib.request.BaseHandler] = [NoRedirects()]
    if is_local(base_url):  # a proxy for 127.0.0.1 is never right
        handlers.append(urllib.request.ProxyHandler({}))
    try:
        request = urllib.request.Request(base_url.rstrip("/") + "/models", headers=headers)
        with urllib.request.build_opener(*handlers).open(request, timeout=timeout) as response:
            status, body = response.status, response.read(MAX_BODY)
    except urllib.error.HTTPError as exc:
        try:
            body = exc.read(64 * 1024)
        except Exception:
            body = b""
        finally:
            exc.close()
        return Answer(exc.code, problem=_http_problem(exc.code, exc.headers, body, key))
    except urllib.error.URLError as exc:
        return Answer(problem=_redact(_network_problem(exc.reason, timeout), key))
    except (OSError, ValueError, http.client.HTTPException) as exc:  # not HTTP, a bad URL, a lost connection
        return Answer(problem=_redact(_network_problem(exc, timeout), key))
    models = _model_ids(body)
    if models is None:
        return Answer(status, problem="it answered, but not with a list of models")
    return Answer(status, models)


def find_local_servers(
    servers: Sequence[LocalServer] = LOCAL_SERVERS, timeout: float = PROBE_TIMEOUT
) -> list[tuple[LocalServer, Answer]]:
    """The ``servers`` that answer, all asked at once: with their models, or a 401/403 (they want a key)."""
    from concurrent.futures import ThreadPoolExecutor  # here: logout and login outside a terminal never probe (2.5 ms)

    if not servers:
        return []

    def probe(server: LocalServer) -> Answer:
        try:
            return fetch_models(server.base_url, timeout=timeout)
        except Exception as exc:  # whatever listens on that port, login goes on
            return Answer(problem=type(exc).__name__)

    with ThreadPoolExecutor(max_workers=len(servers)) as pool:
        answers = list(pool.map(probe, servers))
    return [(s, a) for s, a in zip(servers, answers, strict=True) if a.listed or a.refused]


def _model_ids(body: bytes) -> list[str] | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    items = data.get("data") if isinstance(data, dict) else data
    if not isinstance(items, list):
        return None
    ids = [item.get("id") if isinstance(item, dict) else item for item in items]
    return sorted({i for i in ids if isinstance(i, str) and i})


def _http_problem(status: int, headers: Message, body: bytes, key: str | None) -> str:
    text = f"HTTP {status}"
    if 300 <= status < 400 and headers.get("Location"):
        text += f", a redirect to {printable(headers['Location'], secret=key)} (use that URL if you trust it)"
    message = _server_message(body, key)
    return f"{text}: {message}" if message else text


def _server_message(body: bytes, key: str | None) -> str:
    text = body.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        return "" if text.lstrip().startswith("<") else printable(text, secret=key)  # an HTML page says little
    for found in (data, data.get("error") if isinstance(data, dict) else None):
        if isinstance(found, str):
            return printable(found, secret=key)
        if isinstance(found, dict):
            for field in ("message", "detail", "error"):
                if isinstance(found.get(field), str):
                    return printable(found[field], secret=key)
    return ""


def _network_problem(reason: object, timeout: float) -> str:
    if isinstance(reason, TimeoutError) or "timed out" in str(reason):
        return f"no answer within {timeout:g} s"
    if isinstance(reason, ConnectionRefusedError):
        return "the connection was refused (is the server running?)"
    if isinstance(reason, socket.gaierror):
        return "the host name could not be resolved (is the URL right, and the network up?)"
    if isinstance(reason, ssl.SSLCertVerificationError):
        return f"its TLS certificate could not be verified ({reason.verify_message})"
    if isinstance(reason, OSError) and reason.strerror:
        return printable(reason.strerror)
    if isinstance(reason, http.client.HTTPException):
        return f"it does not answer in HTTP ({type(reason).__name__})"
    return printable(str(reason)) or type(reason).__name__


def printable(text: str, limit: int = 300, *, secret: str | None = None) -> str:
    """``text`` on one line, its control characters made visible (:func:`refagent.acp.text.one_line`),
    without ``secret`` (blanked out before anything is cut), at most ``limit`` characters long."""
    text = one_line(_redact(text, secret))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _redact(text: str, key: str | None) -> str:
    return text.replace(key, "***") if key else text


def normalize_url(text: str) -> str | None:
    """An endpoint URL from what the user typed (the scheme added, ``/models`` and the like taken off),
    or ``None`` if it is not an http(s) URL with a host."""
    text = text.strip()
    if not text:
        return None
    if "://" not in text:
        text = ("http://" if is_local(text) else "https://") + text
    text = re.sub(r"/+(models|chat/completions)?/*$", "", text)
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in text):
        return None
    return text


def suggest_profile_id(base_url: str) -> str:
    """A profile id for ``base_url``: ``openai``, the local server's name, or the host's main name."""
    parts = urlsplit(base_url)
    host = (parts.hostname or "").lower()
    if host == "api.openai.com":
        return "openai"
    if is_local(base_url):
        known = {server.port: server.profile_id for server in LOCAL_SERVERS}
        return known.get(parts.port or 0) or (f"local-{parts.port}" if parts.port else "local")
    try:
        ipaddress.ip_address(host)
        return "custom"
    except ValueError:
        pass
    labels = [label for label in host.split(".") if label not in ("api", "www")]
    name = labels[-2] if len(labels) >= 2 else (labels[0] if labels else "")
    name = re.sub(r"[^a-z0-9-]+", "-", name).strip("-")
    return name if name and name != SCRIPTED else "custom"
