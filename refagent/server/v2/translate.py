"""What v1 says, said in v2: pure functions from the v1 shapes the session machinery speaks to the v2 draft's
(and the few the other way). No I/O; :mod:`refagent.server.v2.bridge` applies them on the wire.

The differences that matter here (the v2 draft, schema 2.0.0-alpha.3 as SDK 2.4.0 ships it):

- ``tool_call`` is gone: the first ``tool_call_update`` creates the call, with every field;
- a diff is ``{changes: [{operation, path}], patch: {format: "git_patch", text}}``, not the two texts;
- ``plan`` is ``plan_update {plan: {type: "items", planId, entries}}``: v1's one plan of a session gets the
  session's plan id; v1's plan operations (unstable ``plan_update`` and ``plan_removed``, each plan by its
  own id) are v2's as they are, and a v2 client takes them (its v1 capabilities say ``plan``);
- subagents are child sessions (``subagent_update``, ``session_message``), v1's unstable shapes as they
  are: every v2 client registers them (its v1 capabilities say ``subagents``);
- a command is ``{type: "command", name, description, input: {type: "text", hint}}``;
- a config option is named by ``configId``, and set with a typed value (``{type: "id", value}``);
- modes are gone (``current_mode_update`` is dropped: the ``mode`` config option says it);
- a chunk must carry its ``messageId``;
- ``initialize`` carries ``info`` and ``capabilities``; auth methods carry ``type`` and ``methodId``;
- MCP servers carry ``type`` (``stdio`` too), and SSE is gone.
"""

from __future__ import annotations

import difflib
from typing import Any

from refagent import __version__
from refagent.ids import new_id

V2 = 2
CHUNKS = frozenset({"user_message_chunk", "agent_message_chunk", "agent_thought_chunk"})
WHOLE = {
    "user_message_chunk": "user_message",
    "agent_message_chunk": "agent_message",
    "agent_thought_chunk": "agent_thought",
}
"""The whole-message update of each chunk kind."""
V2_UNSTABLE_SESSION = ("fork", "title", "archive")
"""The unstable session capabilities v1 and v2 share that the bridge serves with saved sessions
(``session/fork``, ``session/set_title``, ``session/archive`` and ``session/unarchive``): offered in v2
when v1 offers them."""
SAME = frozenset(
    {
        "session_info_update",
        "usage_update",
        "notice",
        "compaction_update",
        "plan_update",
        "plan_removed",
        "subagent_update",
        "session_message",
        "session_message_chunk",
    }
)
"""Update kinds whose v1 shape is the v2 one."""


def update(session_id: str, v1: dict[str, Any], kinds: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The v2 form of the v1 ``session/update`` ``v1`` of session ``session_id``; None for one v2 does
    not have (``current_mode_update``, a kind unknown here). ``kinds``: the tool calls' kinds so far, by id
    (kept up to date here), so that a deletion's diff says ``delete``."""
    kind = v1.get("sessionUpdate")
    if kind in CHUNKS:
        chunk = dict(v1)
        if not isinstance(chunk.get("messageId"), str):
            chunk["messageId"] = new_id("msg")  # v2 requires one; ours always carry one
        return chunk
    if kind in ("tool_call", "tool_call_update"):
        known = kinds if kinds is not None else {}
        if isinstance(v1.get("kind"), str):
            known[v1["toolCallId"]] = v1["kind"]
        return tool_call(v1, known.get(v1["toolCallId"]))
    if kind == "plan":
        entries = v1.get("entries") or []
        return _with_meta(v1, {"sessionUpdate": "plan_update", "plan": plan(session_id, entries)})
    if kind == "available_commands_update":
        return _with_meta(
            v1, {"sessionUpdate": "available_commands_update", "availableCommands": commands(v1["availableCommands"])}
        )
    if kind == "config_option_update":
        return _with_meta(
            v1, {"sessionUpdate": "config_option_update", "configOptions": config_options(v1["configOptions"])}
        )
    if kind in SAME:
        return dict(v1)
    return None


def replayed(v2: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The v2 updates of a history replay with its messages whole: each run of chunks of one message becomes
    that message's update (``agent_message`` with all its content, adjacent plain texts joined), sent where
    its first chunk was. A chunk of a message already sent (its chunks interleaved with another's) stays a
    chunk, after the whole message it extends, as the draft asks of a replay."""
    out: list[dict[str, Any]] = []
    built: dict[int, None] = {}  # ids of the whole messages made here, which later chunks may extend
    sent: set[tuple[str, str]] = set()
    for item in v2:
        whole = WHOLE.get(item.get("sessionUpdate", ""))
        if whole is None:
            out.append(item)
            continue
        key = (whole, item["messageId"])
        last = out[-1] if out else None
        if last is not None and id(last) in built and (last["sessionUpdate"], last["messageId"]) == key:
            _extend(last["content"], item["content"])
        elif key in sent:
            out.append(item)
        else:
            sent.add(key)
            message = _with_meta(item, {"sessionUpdate": whole, "messageId": item["messageId"], "content": []})
            _extend(message["content"], item["content"])
            built[id(message)] = None
            out.append(message)
    return out


def _extend(content: list[dict[str, Any]], block: dict[str, Any]) -> None:
    """Add ``block`` to a message's ``content``, joined to the text before it when both are plain text."""
    plain = block.get("type") == "text" and block.keys() == {"type", "text"}
    if plain and content and content[-1].get("type") == "text" and content[-1].keys() == {"type", "text"}:
        content[-1] = {"type": "text", "text": content[-1]["text"] + block["text"]}
    else:
        content.append(dict(block))


def tool_call(v1: dict[str, Any], kind: str | None = None) -> dict[str, Any]:
    """A ``tool_call`` or ``tool_call_update`` as the v2 ``tool_call_update`` (which creates the call the first
    time its id is seen), its content translated. ``kind``: the call's (a ``delete`` empties files by
    removing them)."""
    call = {**v1, "sessionUpdate": "tool_call_update"}
    if isinstance(call.get("content"), list):
        call["content"] = tool_content(call["content"], deleting=kind == "delete")
    return call


def tool_content(items: list[dict[str, Any]], *, deleting: bool = False) -> list[dict[str, Any]]:
    """Tool call content in v2: diffs as changes and a git patch; an editor's terminal (which a v2 client
    never has: it has no ``terminal/*``) left out."""
    out = []
    for item in items:
        kind = item.get("type")
        if kind == "diff":
            out.append(diff(item, deleting=deleting))
        elif kind != "terminal":
            out.append(item)
    return out


def diff(v1: dict[str, Any], *, deleting: bool = False) -> dict[str, Any]:
    """A v1 diff (``path``, ``oldText`` (None: a new file), ``newText``) as a v2 diff: the change, and the
    patch in git's format (``diff --git``; ``/dev/null`` for a file made or deleted). ``deleting``: the call
    deletes files, so one emptied is one removed (v1 shows a deletion as the text going to nothing)."""
    path = str(v1.get("path", ""))
    old = v1.get("oldText")
    new = v1.get("newText")
    operation = "add" if old is None else "delete" if deleting and not new else "modify"
    before = "" if old is None else str(old)
    after = "" if operation == "delete" or new is None else str(new)
    name = path.lstrip("/")
    head = [f"diff --git a/{name} b/{name}\n"]
    if operation == "add":
        head.append("new file mode 100644\n")
    elif operation == "delete":
        head.append("deleted file mode 100644\n")
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        "/dev/null" if operation == "add" else f"a/{name}",
        "/dev/null" if operation == "delete" else f"b/{name}",
    )
    body = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    result: dict[str, Any] = {
        "type": "diff",
        "changes": [{"operation": operation, "path": path}],
        "patch": {"format": "git_patch", "text": "".join(head) + body},
    }
    return _with_meta(v1, result)


def plan(session_id: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The session's one plan (v1 has one per session: each update replaces it whole)."""
    return {"type": "items", "planId": f"plan_{session_id}", "entries": entries}


def commands(v1: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for command in v1:
        item: dict[str, Any] = {"type": "command", "name": command["name"], "description": command["description"]}
        hint = (command.get("input") or {}).get("hint")
        if isinstance(hint, str):
            item["input"] = {"type": "text", "hint": hint}
        out.append(item)
    return out


def config_options(v1: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Options named by ``configId`` (v1: ``id``); everything else as it is."""
    out = []
    for option in v1:
        item = {key: value for key, value in option.items() if key != "id"}
        out.append({"configId": option["id"], **item})
    return out


def session_result(v1: dict[str, Any], *, with_id: bool) -> dict[str, Any]:
    """A ``session/new`` (``with_id``) or ``session/resume`` result: its config options (no modes)."""
    result: dict[str, Any] = {"configOptions": config_options(v1.get("configOptions") or [])}
    if with_id:
        result = {"sessionId": v1["sessionId"], **result}
    return result


def initialize_result(v1: dict[str, Any], *, has_store: bool) -> dict[str, Any]:
    """The v2 ``initialize`` result for the v1 one: the same features in v2's terms."""
    capabilities = v1["agentCapabilities"]
    prompt: dict[str, Any] = {"embeddedContext": {}}
    if capabilities["promptCapabilities"].get("image"):
        prompt["image"] = {}
    session: dict[str, Any] = {"prompt": prompt, "mcp": {"stdio": {}, "http": {}}, "additionalDirectories": {}}
    v1_session = capabilities.get("sessionCapabilities") or {}
    if "systemPrompt" in v1_session:  # unstable, the same shape in both
        session["systemPrompt"] = v1_session["systemPrompt"]
    if has_store:
        session["delete"] = {}
        session.update({name: {} for name in V2_UNSTABLE_SESSION if name in v1_session})
    result: dict[str, Any] = {
        "protocolVersion": V2,
        "info": v1.get("agentInfo") or {"name": "refagent", "version": __version__},
        "capabilities": {"session": session},
    }
    if "status" in v1_session:  # unstable: session/status, with or without saved sessions
        session["status"] = {}
    if isinstance(capabilities.get("providers"), dict):  # unstable, the same in both
        result["capabilities"]["providers"] = capabilities["providers"]
    if isinstance((capabilities.get("auth") or {}).get("status"), dict):  # unstable: auth/status
        result["capabilities"]["auth"] = {"status": {}}
    if isinstance(v1.get("_meta"), dict):  # steering, on the result as in v1 (refagent.session.steering)
        result["_meta"] = v1["_meta"]
    methods = [auth_method(method) for method in v1.get("authMethods") or []]
    if methods:
        result["authMethods"] = methods
    return result


def auth_method(v1: dict[str, Any]) -> dict[str, Any]:
    method: dict[str, Any] = {
        "type": v1.get("type", "agent"),
        "methodId": v1["id"],
        "name": v1["name"],
        "description": v1.get("description"),
    }
    if "args" in v1:
        method["args"] = v1["args"]
    return method


def client_capabilities(v2: dict[str, Any]) -> dict[str, Any]:
    """The v1 client capabilities a v2 client amounts to: no ``fs`` or ``terminal`` (v2 has none: the agent
    uses its own disk and processes), the notices, compactions and plans by id v2 has as updates, and the
    terminal sign-in and the forms (elicitation) the client offers; and subagents as child sessions, which
    every v2 client registers (a baseline of the draft, no capability asked)."""
    capabilities: dict[str, Any] = {"session": {"notices": {}, "compaction": {}}, "plan": {}, "subagents": {}}
    auth = v2.get("auth")
    if isinstance(auth, dict) and isinstance(auth.get("terminal"), dict):
        capabilities["auth"] = {"terminal": True}
    if isinstance(v2.get("elicitation"), dict):  # the same shape in both, and so are the requests
        capabilities["elicitation"] = v2["elicitation"]
    return capabilities


def mcp_servers(v2: list[Any]) -> list[Any]:
    """v2 MCP servers in v1: a stdio server has no ``type`` in v1 (the rest is the same)."""
    out = []
    for server in v2:
        if isinstance(server, dict) and server.get("type") == "stdio":
            server = {key: value for key, value in server.items() if key != "type"}
        out.append(server)
    return out


def permission_request(v1: dict[str, Any]) -> dict[str, Any]:
    """``session/request_permission``: the call it is about as the v2 subject, its title as the title."""
    call = tool_call({**v1["toolCall"], "sessionUpdate": "tool_call"})
    del call["sessionUpdate"]
    return {
        "sessionId": v1["sessionId"],
        "title": str(call.get("title") or "Allow this tool call?"),
        "subject": {"type": "tool_call", "toolCall": call},
        "options": v1["options"],
    }


def _with_meta(source: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    if isinstance(source.get("_meta"), dict):
        target["_meta"] = source["_meta"]
    return target
