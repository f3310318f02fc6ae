"""The agent's side of the client: one typed method per ACP method the agent calls on the client.

Everything in refagent that talks to the editor goes through :class:`SessionClient` (one per session, made
by :meth:`Client.session`): session updates, permission requests, the editor's files and terminals, and
elicitation. Each method builds the params the schema asks for and reads the answer into a typed value,
so no caller handles the client's raw JSON.

The contract for answers:

- an error response raises :class:`~refagent.acp.errors.RequestError` as the connection gives it (its
  ``code``, ``message`` and ``data``);
- an answer that is not in the schema's shape raises :class:`BadAnswer` (a ``RequestError`` too, so a
  caller that treats "the editor failed" alike needs one ``except``), whose message says what was wrong;
- what the schema leaves open (an unknown permission option, an unknown elicitation action) is returned as
  it came, for the caller to judge.

Which methods the client offers is in its capabilities (:attr:`SessionClient.capabilities`); calling one it
did not advertise is the caller's mistake, not checked here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from refagent.acp.awaited import EDITOR_WORK, current
from refagent.acp.errors import RequestError

if TYPE_CHECKING:  # annotations only: a session is made (session/new's response) before the wire types load
    from refagent.acp.connection import Peer
    from refagent.acp.types import ClientCapabilities, PermissionOption


class BadAnswer(RequestError):
    """The client answered a request with a result outside the schema's shape."""


@dataclass(frozen=True, slots=True)
class PermissionAnswer:
    """The client's answer to ``session/request_permission``: ``selected`` with the option the user chose
    (as the client sent it: it may name none of the options offered), or ``cancelled`` (the turn was)."""

    outcome: Literal["selected", "cancelled"]
    option_id: str | None = None


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """How a terminal's command ended (``terminal/wait_for_exit``, or ``terminal/output`` once it has)."""

    exit_code: int | None = None
    signal: str | None = None


@dataclass(frozen=True, slots=True)
class TerminalOutput:
    """``terminal/output``: what the terminal holds, whether the client cut it, and how the command ended
    (None while it runs)."""

    output: str
    truncated: bool
    exit_status: ExitStatus | None


@dataclass(frozen=True, slots=True)
class ElicitationAnswer:
    """The client's answer to ``elicitation/create``: its ``action`` as sent (``accept``, ``decline``,
    ``cancel``, or something the caller does not know) and, for ``accept``, the form's ``content``."""

    action: str
    content: dict[str, Any]


class Client:
    """The client at the other end of the connection (``peer``), with the capabilities it advertised in
    ``initialize``. Cheap: one per connection, and a :class:`SessionClient` per session."""

    def __init__(self, peer: Peer, capabilities: ClientCapabilities | None = None) -> None:
        self.peer = peer
        self.capabilities: ClientCapabilities = capabilities if capabilities is not None else {}

    def session(self, session_id: str) -> SessionClient:
        """The client's methods for the session ``session_id``."""
        return SessionClient(self.peer, session_id, self.capabilities)


class SessionClient:
    """The client's methods as one session calls them (each request carries its ``sessionId``)."""

    def __init__(self, peer: Peer, session_id: str, capabilities: ClientCapabilities) -> None:
        self.peer = peer
        self.session_id = session_id
        self.capabilities = capabilities
        self.asking = 0
        """Questions to the user waiting on an answer now (a permission, a form): what ``session/status``
        reports as waiting."""

    # What the client offers (its capabilities, read once here for every caller).

    @property
    def reads_files(self) -> bool:
        """``fs.readTextFile``: the client answers ``fs/read_text_file``."""
        return bool((self.capabilities.get("fs") or {}).get("readTextFile"))

    @property
    def writes_files(self) -> bool:
        """``fs.writeTextFile``: the client answers ``fs/write_text_file``."""
        return bool((self.capabilities.get("fs") or {}).get("writeTextFile"))

    @property
    def takes_plans(self) -> bool:
        """``plan`` (unstable): the client shows plans by id (``plan_update``, ``plan_removed``), not only the
        one whole v1 ``plan``."""
        return isinstance(self.capabilities.get("plan"), dict)

    @property
    def has_terminals(self) -> bool:
        """``terminal: true``: the client runs commands in terminals of its own (``terminal/*``)."""
        return self.capabilities.get("terminal") is True

    @property
    def has_forms(self) -> bool:
        """``elicitation.form`` is an object (``{}`` is one): the client shows ``elicitation/create`` forms."""
        elicitation = self.capabilities.get("elicitation")
        return isinstance(elicitation, dict) and isinstance(elicitation.get("form"), dict)

    # session/update

    async def send_update(self, update: dict[str, Any]) -> None:
        """Send ``update`` (a ``SessionUpdate``) as a ``session/update`` notification."""
        await self.peer.notify("session/update", {"sessionId": self.session_id, "update": update})

    async def send_recorded(self, lines: bytes) -> None:
        """Send ``session/update`` notifications recorded earlier as they are: the lines of a session's
        replay file (:mod:`refagent.persistence.records`), each a whole notification of this session."""
        await self.peer.send_lines(lines)

    # session/request_permission

    async def request_permission(self, tool_call: dict[str, Any], options: list[PermissionOption]) -> PermissionAnswer:
        """Ask the user whether ``tool_call`` (a ``ToolCallUpdate``) may run, offering ``options``."""
        result = await self._request("session/request_permission", toolCall=tool_call, options=options)
        outcome = result.get("outcome") if isinstance(result, dict) else None
        kind = outcome.get("outcome") if isinstance(outcome, dict) else None
        if kind == "cancelled":
            return PermissionAnswer("cancelled")
        if kind != "selected" or not isinstance(outcome, dict):
            raise BadAnswer(f"the answer to session/request_permission has no outcome: {_shown(result)}")
        option = outcome.get("optionId")
        return PermissionAnswer("selected", option if isinstance(option, str) else None)

    # fs/*

    async def read_text_file(self, path: str) -> str:
        """The text of the file at ``path`` (absolute) as the editor has it, unsaved changes included."""
        result = await self._request("fs/read_text_file", path=path)
        content = result.get("content") if isinstance(result, dict) else None
        if not isinstance(content, str):
            raise BadAnswer(f"the editor returned no content for {path}")
        return content

    async def write_text_file(self, path: str, content: str) -> None:
        """Write ``content`` to the file at ``path`` (absolute), through the editor."""
        await self._request("fs/write_text_file", path=path, content=content)  # {} (or null from some editors)

    # terminal/*

    async def create_terminal(self, command: str, args: list[str], cwd: str, output_byte_limit: int) -> str:
        """Start ``command`` with ``args`` in ``cwd`` in a terminal of the client's; its terminal id."""
        result = await self._request(
            "terminal/create", command=command, args=args, cwd=cwd, outputByteLimit=output_byte_limit
        )
        terminal_id = result.get("terminalId") if isinstance(result, dict) else None
        if not isinstance(terminal_id, str):
            raise BadAnswer("the editor did not return a terminal id")
        return terminal_id

    async def wait_for_terminal_exit(self, terminal_id: str) -> ExitStatus:
        """Wait until the terminal's command ends; how it ended."""
        return _exit_status(await self._request("terminal/wait_for_exit", terminalId=terminal_id)) or ExitStatus()

    async def terminal_output(self, terminal_id: str) -> TerminalOutput:
        """What the terminal holds now."""
        result = await self._request("terminal/output", terminalId=terminal_id)
        fields: dict[str, Any] = result if isinstance(result, dict) else {}
        output = fields.get("output")
        return TerminalOutput(
            output=output if isinstance(output, str) else "",
            truncated=fields.get("truncated") is True,
            exit_status=_exit_status(fields.get("exitStatus")),
        )

    async def kill_terminal(self, terminal_id: str) -> None:
        """Kill the terminal's command (the terminal stays, for its output)."""
        await self._request("terminal/kill", terminalId=terminal_id)

    async def release_terminal(self, terminal_id: str) -> None:
        """Release the terminal: its command is killed if it still runs, and its id is no longer valid."""
        await self._request("terminal/release", terminalId=terminal_id)

    # elicitation/create

    async def elicit_form(
        self, message: str, requested_schema: dict[str, Any], tool_call_id: str | None = None
    ) -> ElicitationAnswer:
        """Show the user a form (``mode: form``) of ``requested_schema`` with ``message``, tied to the tool
        call ``tool_call_id`` if given."""
        params: dict[str, Any] = {"mode": "form", "message": message}
        if tool_call_id:
            params["toolCallId"] = tool_call_id
        params["requestedSchema"] = requested_schema
        result = await self._request("elicitation/create", **params)
        action = result.get("action") if isinstance(result, dict) else None
        if not isinstance(action, str) or not isinstance(result, dict):
            raise BadAnswer(f"the answer to elicitation/create has no action: {_shown(result)}")
        content = result.get("content")
        return ElicitationAnswer(action, content if isinstance(content, dict) else {})

    async def _request(self, method: str, **params: Any) -> Any:
        request = {"sessionId": self.session_id, **params}
        if method in _QUESTIONS:
            self.asking += 1
            try:
                return await self.peer.request(method, request)
            finally:
                self.asking -= 1
        awaited = current()
        if awaited is None or method not in EDITOR_WORK:
            return await self.peer.request(method, request)
        with awaited.request(method):  # a long call's title says whose time it is (refagent.acp.awaited)
            return await self.peer.request(method, request)


_QUESTIONS = frozenset({"session/request_permission", "elicitation/create"})
"""The requests that wait on the user (the others, on the editor alone)."""


def _exit_status(value: Any) -> ExitStatus | None:
    """A wire ``TerminalExitStatus`` (its fields of the wrong type read as absent); None if not an object."""
    if not isinstance(value, dict):
        return None
    code, signal = value.get("exitCode"), value.get("signal")
    return ExitStatus(
        exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
        signal=signal if isinstance(signal, str) else None,
    )


def _shown(value: Any) -> str:
    """A client's answer for a log line or an error message: its repr, cut to 200 characters."""
    text = repr(value)
    return text if len(text) <= 200 else text[:199] + "…"
