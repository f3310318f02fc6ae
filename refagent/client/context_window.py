"""How large a model's context window is, as the server that runs it says: for ``refagent login``.

refagent compacts the conversation and shows its use against the profile's ``context_window`` (128,000
tokens unless set). A local model often runs with far less (llama.cpp and Ollama default to a few thousand
tokens), and then the conversation overflows long before refagent would compact it. Each kind of server
says it its own way, so :func:`find_context_window` asks, in this order, and takes the first answer:

1. the model's entry in ``GET {base_url}/models``: ``max_model_len`` (vLLM), ``context_length``
   (OpenRouter and others), ``context_window``, ``max_context_length``;
2. llama.cpp's ``GET /props``: ``n_ctx``, the window the server was started with;
3. LM Studio's ``GET /api/v0/models/{model}``: the loaded context length, else the model's maximum;
4. Ollama's ``POST /api/show``: a ``num_ctx`` the model sets. Without one Ollama runs the model with its own
   default (a few thousand tokens, or ``OLLAMA_CONTEXT_LENGTH``), which no endpoint says: then nothing is
   found, and the trained length is only a hint (:attr:`Window.hint`) for the question login asks.

Every request is :mod:`urllib`, without redirects, without a proxy for this machine, with the key as the
bearer token, size-capped and short; any failure means "not found here", never an error.
"""

from __future__ import annotations

import json
import re
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from refagent import __version__
from refagent.client.endpoints import MAX_BODY, NoRedirects
from refagent.llm.profiles import is_local

TIMEOUT = 3.0
"""Seconds each question may take: these are extras, and login waits on them."""
LISTING_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length")
SMALLEST, LARGEST = 256, 100_000_000
"""What a context window may be: anything else a server says is not believed."""


@dataclass(frozen=True, slots=True)
class Window:
    """What was found: ``tokens`` (None: nothing the model surely runs with), where it was said, and a hint
    for the user when only the model's trained length is known."""

    tokens: int | None
    source: str = ""
    hint: str = ""


def find_context_window(base_url: str, model: str, key: str | None = None, *, timeout: float = TIMEOUT) -> Window:
    """The context window ``model`` runs with at ``base_url``, as the module docstring says."""
    root = re.sub(r"/v1/?$", "", base_url.rstrip("/"))
    listing = _get_json(base_url.rstrip("/") + "/models", key, timeout)
    entries = listing.get("data") if isinstance(listing, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("id") == model:
            for name in LISTING_KEYS:
                if (tokens := _tokens(entry.get(name))) is not None:
                    return Window(tokens, f"its model list ({name})")
    props = _get_json(root + "/props", key, timeout)
    if isinstance(props, dict):
        settings = props.get("default_generation_settings")
        for found in (settings.get("n_ctx") if isinstance(settings, dict) else None, props.get("n_ctx")):
            if (tokens := _tokens(found)) is not None:
                return Window(tokens, "llama.cpp's /props (n_ctx)")
    studio = _get_json(f"{root}/api/v0/models/{quote(model, safe='')}", key, timeout)
    if isinstance(studio, dict):
        for name in ("loaded_context_length", "max_context_length"):
            if (tokens := _tokens(studio.get(name))) is not None:
                return Window(tokens, f"LM Studio ({name})")
    shown = _get_json(root + "/api/show", key, timeout, body={"model": model})
    if isinstance(shown, dict):
        parameters = shown.get("parameters")
        match = re.search(r"(?m)^\s*num_ctx\s+(\d+)\s*$", parameters) if isinstance(parameters, str) else None
        if match and (tokens := _tokens(int(match.group(1)))) is not None:
            return Window(tokens, "Ollama (the model's num_ctx)")
        info = shown.get("model_info")
        lengths = (
            [_tokens(v) for k, v in info.items() if k.endswith(".context_length")] if isinstance(info, dict) else []
        )
        trained = next((length for length in lengths if length is not None), None)
        if trained is not None:
            hint = (
                f"the model was trained for {trained:,} tokens, but Ollama runs it with its own default "
                "(num_ctx, or OLLAMA_CONTEXT_LENGTH) unless that is raised"
            )
            return Window(None, hint=hint)
    return Window(None)


def parse_tokens(text: str) -> int | None:
    """A context window as typed: ``32768``, ``32,768``, ``32k`` (x1024), ``1m``; None if it is not one."""
    match = re.fullmatch(r"\s*(\d[\d,_]*)\s*([kKmM]?)\s*", text)
    if match is None:
        return None
    number = int(match.group(1).replace(",", "").replace("_", ""))
    number *= {"": 1, "k": 1024, "m": 1024 * 1024}[match.group(2).lower()]
    return _tokens(number)


def _tokens(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if SMALLEST <= value <= LARGEST else None


def _get_json(url: str, key: str | None, timeout: float, *, body: dict[str, Any] | None = None) -> Any:
    """The JSON ``url`` answers with (a POST of ``body`` if given), or None for any failure."""
    headers = {"Accept": "application/json", "User-Agent": f"refagent/{__version__} (login)"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    handlers: list[urllib.request.BaseHandler] = [NoRedirects()]
    if is_local(url):
        handlers.append(urllib.request.ProxyHandler({}))
    try:
        request = urllib.request.Request(url, data=data, headers=headers)
        with urllib.request.build_opener(*handlers).open(request, timeout=timeout) as response:
            if response.status != 200:
                return None
            return json.loads(response.read(MAX_BODY))
    except Exception:  # not there, not JSON, not this kind of server: nothing found here
        return None
