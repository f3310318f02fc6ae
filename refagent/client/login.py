"""``refagent login``: set up a model in the config file, interactively, in a terminal; ``refagent logout``:
forget the keys stored there.

An ACP client can run ``refagent login`` in a terminal for its user (an ``authMethods`` entry of type
``terminal``); people run it by hand too. It asks, in this order:

1. the endpoint: OpenAI, a model server found on this machine (those of :data:`LOCAL_SERVERS` on 127.0.0.1
   that answer ``/v1/models``), another provider refagent knows by name (Anthropic, Gemini, OpenRouter,
   DeepSeek, Groq, Mistral, xAI: :mod:`refagent.config.providers`; the profile names its API, ``client``),
   or any OpenAI-compatible URL (which can also be typed at once);
2. the model, from the endpoint's ``/v1/models`` when it lists them, else typed; and, but for the
   providers refagent knows the models of, its context window, as the server says it
   (:mod:`refagent.client.context_window`) or else typed (Enter: refagent's default);
3. the key, read without echo (:func:`getpass.getpass`) and checked with a ``GET /v1/models``: 200 is good
   (called working only when the endpoint refuses a request without a key, or refused another key: a server
   that lists its models to anyone takes any key, and that is said instead), 401/403 asks again, an
   endpoint that does not answer can be asked again or the key saved unchecked.
   The key comes before the model when the endpoint lists its models only to a key (OpenAI does); a
   server found on this machine that answers without one is not asked for one (a typed URL is, and
   Enter means none);
4. where the key lives: the config file (``api_key``; the file is 0600) or an environment variable
   (``api_key_env``);
5. the profile's name (its id in the editor's model picker), and whether it becomes ``default_profile``
   when another one is.

The profile is written by :func:`refagent.config.writer.set_profile`, which keeps the rest of the file;
logging in again to a profile of the same name keeps its other settings, except those that describe a
model (context window, images, prices, reasoning effort) when the model or the endpoint changed.

The key is never printed or logged (what a server answers is shown with the key blanked out). The
endpoints, and how they are asked, are :mod:`refagent.client.endpoints`.

Exit codes: 0 saved (logout: done); 1 the config file cannot be read or written; 2 not a terminal;
130 cancelled (Ctrl-C, or the end of input): nothing is saved.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from refagent.client.context_window import Window, find_context_window, parse_tokens
from refagent.client.endpoints import (
    CHECK_TIMEOUT,
    LOCAL_SERVERS,
    OPENAI,
    PROBE_TIMEOUT,
    Answer,
    Endpoint,
    LocalServer,
    fetch_models,
    find_local_servers,
    normalize_url,
    printable,
    suggest_profile_id,
)
from refagent.config import writer
from refagent.config.profiles import DEFAULT_OPENAI_MODEL
from refagent.config.providers import Provider, built_in
from refagent.errors import ConfigError
from refagent.llm.profiles import DEFAULT_WINDOW, SCRIPTED

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_NOT_A_TERMINAL = 2
EXIT_CANCELLED = 130

DEFAULT_CONTEXT_WINDOW = DEFAULT_WINDOW
"""What refagent assumes when a profile does not say (:class:`refagent.llm.profiles.ModelProfile`)."""
MAX_LISTED = 30
"""More models than this are listed only when asked (OpenAI lists over a hundred)."""
MODEL_KEYS = (
    "context_window",
    "images",
    "input_price",
    "output_price",
    "reasoning_effort",
    "default_reasoning_effort",
)
"""The profile settings that describe its model: dropped when login changes the model or the endpoint."""
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PROFILE_ID = re.compile(r"[A-Za-z0-9_-]+")
KEY_CHARS = re.compile(r"[\x21-\x7e]+")
"""What a key may hold: printable ASCII without spaces (it goes into an HTTP header)."""
OVERRIDES = ("REFAGENT_PROFILE", "OPENAI_BASE_URL", "REFAGENT_MODEL")
"""Variables that override the config file when refagent starts (see :mod:`refagent.config.loading`)."""


PROVIDERS = Endpoint("", "")
"""The menu entry that leads to the list of providers (:meth:`Login._provider`)."""


def _providers() -> list[Provider]:
    """The providers offered by name: the data file's, but OpenAI and this machine's servers."""
    return [p for p in built_in().values() if p.id != "openai" and not p.local]


class Login:
    """The questions and what they lead to. ``ask`` reads a line the user typed, ``secret`` one that is not
    echoed, ``say`` writes a line; :meth:`run` returns the saved profile's id. Ctrl-C (``KeyboardInterrupt``)
    and the end of input (``EOFError``) pass through: nothing is saved then."""

    def __init__(
        self,
        path: Path,
        *,
        ask: Callable[[str], str] = input,
        secret: Callable[[str], str] = getpass.getpass,
        say: Callable[[str], None] = print,
        env: Mapping[str, str] = os.environ,
        local_servers: Sequence[LocalServer] = LOCAL_SERVERS,
        probe_timeout: float = PROBE_TIMEOUT,
        check_timeout: float = CHECK_TIMEOUT,
        find_window: Callable[[str, str, str | None], Window] = find_context_window,
    ) -> None:
        self.path = path
        self.ask = ask
        self.secret = secret
        self.say = say
        self.env = env
        self.local_servers = local_servers
        self.probe_timeout = probe_timeout
        self.check_timeout = check_timeout
        self.find_window = find_window
        self._keyless: Answer | None = None
        """What the endpoint answered a request without a key, when one was sent (``None``: not asked yet)."""

    def run(self) -> str:
        data = writer.read(self.path)  # a broken file stops here, before any question
        found = data.get("profiles")
        profiles: dict[str, Any] = found if isinstance(found, dict) else {}
        self.say(f"Set up a model for refagent. The settings go to {self.path}.")
        endpoint, answer = self._endpoint()
        key: str | None = None  # None: not asked (yet); "": none
        if answer.refused:  # it lists its models only to a key
            key, answer = self._key(endpoint, required=True)
        model = self._model(endpoint, answer.models if answer.listed else None)
        if key is None:
            if endpoint.found and answer.listed:
                self.say("No key needed: the server answered without one.")
                key = ""
            else:
                key, _ = self._key(endpoint, required=False)
        window = self._context_window(endpoint, model, key)
        values: dict[str, Any] = {"base_url": endpoint.base_url, "model": model}
        if endpoint.client is not None:
            values["client"] = endpoint.client
        values.update(self._key_values(endpoint, key))
        profile_id = self._profile_id(endpoint, profiles)
        old = profiles.get(profile_id)
        if isinstance(old, dict) and (old.get("model"), old.get("base_url")) != (model, endpoint.base_url):
            values.update(dict.fromkeys(MODEL_KEYS))
        values.update(window)
        default = self._default(profile_id, data, profiles)
        writer.set_profile(self.path, profile_id, values, default=default)
        what = f"the default profile {profile_id!r}" if default else f"the profile {profile_id!r}"
        self.say(f"Saved {what} ({printable(model)} at {endpoint.base_url}) in {self.path}.")
        for name in OVERRIDES:
            if self.env.get(name, "").strip():
                self.say(f"Note: {name} is set here, and overrides the config file for a refagent started with it.")
        self.say("refagent reads it when it starts, and when the editor authenticates again.")
        return profile_id

    # -- 1. the endpoint --

    def _endpoint(self) -> tuple[Endpoint, Answer]:
        self.say("Looking for model servers on this machine...")
        found = find_local_servers(self.local_servers, self.probe_timeout)
        options: list[tuple[str, Endpoint | None, Answer]] = [
            (f"OpenAI ({OPENAI.base_url})", OPENAI, Answer(401)),  # it always wants a key: no need to ask
            *(
                (
                    f"{server.label} on this machine ({server.base_url}){', wants a key' if answer.refused else ''}",
                    Endpoint(server.base_url, server.profile_id, found=True),
                    answer,
                )
                for server, answer in found
            ),
            (f"Another provider ({', '.join(p.name for p in _providers())})", PROVIDERS, Answer()),
            ("Any OpenAI-compatible URL", None, Answer()),
        ]
        default = 2 if found else 1
        self.say("\nWhich endpoint?")
        for number, (label, _, _) in enumerate(options, 1):
            self.say(f"  {number}) {label}")
        while True:
            reply = self.ask(f"Choose 1-{len(options)}, or type a URL [Enter: {default}]: ").strip()
            if not reply or reply.isdigit():
                number = int(reply or default)
                if 1 <= number <= len(options):
                    _, endpoint, answer = options[number - 1]
                    if endpoint is PROVIDERS:
                        return self._provider()
                    if endpoint is not None:
                        self._keyless = answer if endpoint.found else None  # OpenAI's 401 is assumed, not asked
                        return endpoint, answer
                    return self._url()
                self.say(f"There is no {number}.")
                continue
            url = normalize_url(reply)
            if url is not None:
                return self._url(url)
            self.say("Type a number from the list, or a URL such as https://api.example.com/v1.")

    def _provider(self) -> tuple[Endpoint, Answer]:
        """One of the providers refagent knows by name (its data file), but OpenAI (offered first) and the
        servers of this machine (found, or typed as a URL): each wants a key before it lists its models."""
        providers = _providers()
        self.say("\nWhich provider?")
        for number, provider in enumerate(providers, 1):
            self.say(f"  {number}) {provider.name} ({provider.endpoint(self.env)})")
        while True:
            reply = self.ask(f"Choose 1-{len(providers)}: ").strip()
            if reply.isdigit() and 1 <= int(reply) <= len(providers):
                provider = providers[int(reply) - 1]
                endpoint = Endpoint(
                    provider.endpoint(self.env),
                    provider.id,
                    client=provider.client,
                    key_env=provider.key_env,
                    default_model=provider.default_model,
                    known=True,
                )
                return endpoint, Answer(401)  # each wants a key: no need to ask
            self.say(f"Type a number from 1 to {len(providers)}.")

    def _url(self, url: str | None = None) -> tuple[Endpoint, Answer]:
        while True:
            while url is None:
                url = normalize_url(self.ask("The endpoint's URL (for example https://api.example.com/v1): "))
                if url is None:
                    self.say("That is not an http:// or https:// URL.")
            self.say(f"Asking {url}/models...")
            answer = fetch_models(url, timeout=self.check_timeout)
            if answer.status == 404 and not url.endswith("/v1"):  # most endpoints end in /v1
                other = fetch_models(url + "/v1", timeout=self.check_timeout)
                if other.listed or other.refused:
                    url, answer = url + "/v1", other
                    self.say(f"Found it at {url}.")
            endpoint = Endpoint(url, suggest_profile_id(url))
            self._keyless = answer if answer.status is not None else None
            if answer.listed:
                assert answer.models is not None
                self.say(f"It answers: {_count(len(answer.models), 'model')}.")
                return endpoint, answer
            if answer.refused:
                self.say("It answers, and wants a key.")
                return endpoint, answer
            self.say(f"Could not get its list of models: {answer.problem}.")
            choice = self._letter("[r]etry, [c]hange the URL, or [g]o on without checking? [Enter: r] ", "rcg", "r")
            if choice == "g":
                return endpoint, Answer()
            if choice == "c":
                url = None

    # -- 2. the model --

    def _model(self, endpoint: Endpoint, models: list[str] | None) -> str:
        if not models:
            if models == []:
                self.say("The endpoint lists no models.")
            suggested = DEFAULT_OPENAI_MODEL if endpoint.openai else endpoint.default_model
            hint = f" [Enter: {suggested}]" if suggested else ""
            while True:
                reply = self.ask(f"The model's name{hint}: ").strip() or suggested
                if reply:
                    return reply
                self.say("A model name is needed: the endpoint does not list its models.")
        preferred = DEFAULT_OPENAI_MODEL if endpoint.openai else endpoint.default_model
        default = preferred if preferred in models else models[0]
        if len(models) <= MAX_LISTED:
            self._list(models)
            prompt = f"Choose a model: a number or a name [Enter: {default}]: "
        else:
            self.say(f"\nThe endpoint has {len(models)} models.")
            prompt = f"Choose a model: a name, or ? to list them [Enter: {default}]: "
        while True:
            reply = self.ask(prompt).strip()
            if not reply:
                return default
            if reply == "?":
                self._list(models)
                prompt = f"Choose a model: a number or a name [Enter: {default}]: "
                continue
            if reply.isdigit():
                if 1 <= int(reply) <= len(models):
                    return models[int(reply) - 1]
                self.say(f"There is no {reply}.")
                continue
            if reply not in models:
                self.say(f"{reply!r} is not among the endpoint's models; using it anyway.")
            return reply

    def _list(self, models: list[str]) -> None:
        self.say("\nModels:")
        for number, model in enumerate(models, 1):
            self.say(f"  {number}) {printable(model)}")

    # -- 2b. the context window --

    def _context_window(self, endpoint: Endpoint, model: str, key: str) -> dict[str, Any]:
        """``{"context_window": N}`` as the server says it (:mod:`refagent.client.context_window`) or the
        user types it; ``{}`` for refagent's default (and for OpenAI, whose models refagent knows)."""
        if endpoint.openai or endpoint.known:  # refagent knows its models (the providers' data file)
            return {}
        found = self.find_window(endpoint.base_url, model, key or None)
        if found.tokens is not None:
            self.say(f"Context window: {found.tokens:,} tokens (from {found.source}).")
            return {"context_window": found.tokens}
        if found.hint:
            self.say(f"Note: {found.hint}.")
        prompt = f"The model's context window in tokens, e.g. 32k [Enter: {DEFAULT_CONTEXT_WINDOW:,}, the default]: "
        while True:
            reply = self.ask(prompt).strip()
            if not reply:
                return {}
            tokens = parse_tokens(reply)
            if tokens is not None:
                return {"context_window": tokens}
            self.say("A number of tokens, such as 32768 or 32k.")

    # -- 3. the key --

    def _key(self, endpoint: Endpoint, *, required: bool) -> tuple[str, Answer]:
        """A key the endpoint accepts, with its answer (``""`` for none, when not ``required``)."""
        prompt = f"API key for {endpoint.base_url} (input hidden{'' if required else '; Enter: none'}): "
        checks_keys = False  # a key was refused: this endpoint checks the keys it is given
        while True:
            key = self.secret(prompt).strip()
            if not key:
                if required:
                    self.say("This endpoint wants a key.")
                    continue
                return "", Answer()
            if not KEY_CHARS.fullmatch(key):
                self.say("That does not look like a key: it has spaces or characters keys do not have.")
                continue
            while True:
                answer = fetch_models(endpoint.base_url, key, timeout=self.check_timeout, anthropic=endpoint.anthropic)
                if answer.status == 200:
                    self.say(self._accepted(endpoint, checks_keys=checks_keys))
                    return key, answer
                if answer.refused:
                    checks_keys = True
                    self.say(
                        f"The endpoint refused this key ({answer.problem}). Paste another, or press Ctrl-C to stop."
                    )
                    break
                self.say(f"Could not check the key: {answer.problem}.")
                choice = self._letter("[r]etry, [p]aste another key, or [s]ave it unchecked? [Enter: r] ", "rps", "r")
                if choice == "s":
                    return key, answer
                if choice == "p":
                    break

    def _accepted(self, endpoint: Endpoint, *, checks_keys: bool) -> str:
        """What the endpoint's 200 to a key proves. Only that the key works if the endpoint refuses requests
        without one (asked once here, if it was not already) or refused another key: a server that lists its
        models to anyone answers 200 to any key, and a wrong key must not be called working."""
        if not checks_keys and (self._keyless is None or self._keyless.status is None):
            self._keyless = fetch_models(endpoint.base_url, timeout=self.check_timeout, anthropic=endpoint.anthropic)
        if checks_keys or self._keyless is None or self._keyless.refused:
            return "The key works."
        if self._keyless.status == 200:
            return "This server lists its models without a key, so the key could not be checked here."
        return f"The server took the key; whether it checks keys could not be told ({self._keyless.problem})."

    def _key_values(self, endpoint: Endpoint, key: str) -> dict[str, Any]:
        """The profile's ``api_key`` and ``api_key_env`` for ``key`` (``None``: no such setting)."""
        if not key:  # a server here needs none anyway; elsewhere say so, or a key would be looked for
            return {"api_key": None if endpoint.local else "", "api_key_env": None}
        self.say(
            f"The key can stay in {self.path.name}, which only you can read, or come from an environment variable."
        )
        while True:
            usual = f" (usually {endpoint.key_env})" if endpoint.key_env else ""
            name = self.ask(f"Environment variable{usual} [Enter: keep it in the file]: ").strip()
            if not name:
                return {"api_key": key, "api_key_env": None}
            if ENV_NAME.fullmatch(name):
                break
            self.say("A variable's name is letters, digits and _, and does not start with a digit.")
        if self.env.get(name) != key:
            self.say(f"Set {name} to the key where your editor starts refagent: it is not saved anywhere.")
        return {"api_key": None, "api_key_env": name}

    # -- 4. the profile --

    def _profile_id(self, endpoint: Endpoint, profiles: Mapping[str, Any]) -> str:
        suggested = endpoint.profile_id
        while True:
            reply = self.ask(f"Name of the profile [Enter: {suggested}]: ").strip() or suggested
            if reply == SCRIPTED:
                self.say(f"{SCRIPTED!r} is the built-in offline model's: choose another name.")
            elif not PROFILE_ID.fullmatch(reply):
                self.say("A profile's name is letters, digits, - and _.")
            else:
                if reply in profiles:
                    self.say(f"The profile {reply!r} exists: its endpoint, model and key are replaced.")
                return reply

    def _default(self, profile_id: str, data: Mapping[str, Any], profiles: Mapping[str, Any]) -> bool:
        current = data.get("default_profile")
        if not isinstance(current, str) or current not in profiles:
            current = next(iter(profiles), None)
        if current is None or current == profile_id:
            return True
        return (
            self._letter(f"Make {profile_id!r} the default profile, instead of {current!r}? [Y/n] ", "yn", "y") == "y"
        )

    def _letter(self, prompt: str, letters: str, default: str) -> str:
        while True:
            reply = self.ask(prompt).strip().lower()[:1] or default
            if reply in letters:
                return reply
            self.say(f"Type one of {', '.join(letters)}.")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


# -- the commands -------------------------------------------------------------------------------------


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(
        "--config",
        metavar="PATH",
        help="the config file (default: $REFAGENT_CONFIG, else config.toml in the user config directory)",
    )
    return parser


def _path(prog: str, flag: str | None) -> Path | None:
    path = writer.config_path(flag, os.environ)
    if path is None:
        print(f"{prog}: there is no user config directory (is HOME set?): pass --config PATH", file=sys.stderr)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """``refagent login [--config PATH]``."""
    args = _parser(
        "refagent login",
        "Set up the model refagent uses: choose an endpoint and a model, paste a key if it needs one "
        "(checked, never shown), and save them as a profile in the config file (which keeps its other content).",
    ).parse_args(argv)
    path = _path("refagent login", args.config)
    if path is None:
        return EXIT_FAILED
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("refagent login asks questions: run it in a terminal.", file=sys.stderr)
        return EXIT_NOT_A_TERMINAL
    with contextlib.suppress(ImportError):
        # here: optional, and only once stdin and stdout are terminals: it changes how input() reads (0.6 ms)
        import readline  # noqa: F401 (line editing for input())
    try:
        Login(path).run()
    except (KeyboardInterrupt, EOFError):
        print("\nrefagent login: cancelled, nothing was saved.", file=sys.stderr)
        return EXIT_CANCELLED
    except ConfigError as exc:
        print(f"refagent login: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def logout_main(argv: Sequence[str] | None = None) -> int:
    """``refagent logout [--config PATH]``: :func:`refagent.config.writer.forget_keys`, and what it did, on
    stderr (as every refagent command that is not the protocol says what it did: stdout is the protocol's)."""
    args = _parser(
        "refagent logout",
        "Forget the API keys stored in the config file (every other setting stays).",
    ).parse_args(argv)
    path = _path("refagent logout", args.config)
    if path is None:
        return EXIT_FAILED
    try:
        removed = writer.forget_keys(path)
        data = writer.read(path)
    except ConfigError as exc:
        print(f"refagent logout: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if removed:
        names = ", ".join(repr(profile_id) for profile_id in removed)
        print(
            f"Removed the stored key of {'the profile' if len(removed) == 1 else 'the profiles'} {names} from {path}.",
            file=sys.stderr,
        )
    else:
        said = f"No key is stored in {path}." if path.exists() else f"There is no config file at {path}."
        print(said, file=sys.stderr)
    for name in _key_variables(data):
        if os.environ.get(name):
            print(
                f"{name} is set in this environment and refagent reads a key from it: unset it to forget that key.",
                file=sys.stderr,
            )
    return EXIT_OK


def _key_variables(data: Mapping[str, Any]) -> list[str]:
    """The environment variables the config file's profiles read their keys from (``OPENAI_API_KEY`` too)."""
    names = {"OPENAI_API_KEY"}
    profiles = data.get("profiles")
    if isinstance(profiles, dict):
        for entry in profiles.values():
            if isinstance(entry, dict) and isinstance(entry.get("api_key_env"), str):
                names.add(entry["api_key_env"])
    return sorted(names)
