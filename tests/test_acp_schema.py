"""The schema check itself (``tests/support/acp_schema.py``): stable ACP v1 of the TypeScript SDK 2.4.0,
and the unstable schema only for the messages of unstable-only features."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.acp_schema import (
    SCHEMA_PATH,
    UNSTABLE_SCHEMA_PATH,
    SchemaViolation,
    _validate,
    unstable_feature,
    unstable_only_methods,
    unstable_only_update_kinds,
    validate_agent_message,
)


def update(session_update: str, /, **fields: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": "s1", "update": {"sessionUpdate": session_update, **fields}},
    }


def test_the_schemas_are_the_sdk_2_4_0_copies() -> None:
    assert SCHEMA_PATH.parent.parts[-2:] == ("sdk-2.4.0", "v1")
    assert SCHEMA_PATH.name == "schema.json"
    assert UNSTABLE_SCHEMA_PATH.name == "schema.unstable.json"
    assert SCHEMA_PATH.is_file()
    assert UNSTABLE_SCHEMA_PATH.is_file()


def test_a_stable_message_passes() -> None:
    validate_agent_message(update("agent_message_chunk", content={"type": "text", "text": "hi"}), None)
    validate_agent_message({"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}}, "session/prompt")
    validate_agent_message(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "fs/read_text_file",
            "params": {"sessionId": "s1", "path": "/tmp/a.py"},
        },
        None,
    )
    validate_agent_message({"jsonrpc": "2.0", "id": 2, "error": {"code": -32601, "message": "nope"}}, "x")


def test_a_malformed_message_fails_with_a_clear_error() -> None:
    with pytest.raises(SchemaViolation) as raised:
        validate_agent_message(update("agent_message_chunk"), None)
    text = str(raised.value)
    assert text.startswith(
        'session/update violates the stable ACP schema (SessionNotification): "content" is a required property'
        " at update\n"
    )
    assert "'sessionUpdate': 'agent_message_chunk'" in text  # the payload itself is quoted
    assert "unstable schema" not in text  # a stable update kind: no fallback tried
    # a failed oneOf is explained by the branch its tag selects, not as "not valid under any of the schemas"
    with pytest.raises(SchemaViolation, match=r'"photo" at update/content/type is none of "text", "image"'):
        validate_agent_message(update("agent_message_chunk", content={"type": "photo"}), None)
    with pytest.raises(SchemaViolation, match=r'"text" is a required property at update/content'):
        validate_agent_message(update("agent_message_chunk", content={"type": "text"}), None)
    with pytest.raises(SchemaViolation, match=r'"bored" at stopReason is none of "end_turn"'):
        validate_agent_message({"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "bored"}}, "session/prompt")


def test_a_malformed_response_of_a_stable_method_raises_the_stable_error() -> None:
    with pytest.raises(SchemaViolation, match=r"session/new result violates the stable ACP schema"):
        validate_agent_message({"jsonrpc": "2.0", "id": 1, "result": {}}, "session/new")


def test_a_tool_call_with_a_name_passes() -> None:
    validate_agent_message(
        update("tool_call", toolCallId="t1", title="Read a.py", name="read_file", kind="read", status="pending"),
        None,
    )
    validate_agent_message(update("tool_call_update", toolCallId="t1", name="read_file", status="completed"), None)
    # the schema knows the field: it must be a string (or null)
    with pytest.raises(SchemaViolation, match=r'3 is not of types "null", "string" at update/name'):
        validate_agent_message(update("tool_call", toolCallId="t1", title="Read a.py", name=3), None)


def test_notice_and_compaction_updates_are_stable() -> None:
    messages = [
        update("notice", severity="warning", title="Rate limited", description="Retrying in 5 s"),
        update("compaction_update", compactionId="c1", status="in_progress"),
        update("compaction_update", compactionId="c1", status="completed", summary=[{"type": "text", "text": "s"}]),
        update("compaction_summary_chunk", compactionId="c1", content={"type": "text", "text": "more"}),
    ]
    for message in messages:
        assert unstable_feature(message, None) is None
        _validate(message, None, "stable")
        validate_agent_message(message, None)
    assert not {"notice", "compaction_update", "compaction_summary_chunk"} & unstable_only_update_kinds()
    with pytest.raises(SchemaViolation, match=r"at update/title"):
        validate_agent_message(update("notice", severity="info", title=""), None)  # title: minLength 1
    with pytest.raises(SchemaViolation, match='"compactionId" is a required property'):
        validate_agent_message(update("compaction_update", status="completed"), None)


def test_the_unstable_only_sets_come_from_the_schemas() -> None:
    methods = unstable_only_methods()
    assert ("agent", "session/fork", "Request") in methods
    assert ("agent", "session/fork", "Response") in methods
    assert ("client", "mcp/message", "Request") in methods
    assert not any(method == "session/prompt" for _, method, _ in methods)
    kinds = unstable_only_update_kinds()
    assert {"plan_update", "plan_removed", "subagent_update"} <= kinds
    assert "tool_call" not in kinds


def test_a_session_fork_response_passes_only_through_the_unstable_schema() -> None:
    response = {"jsonrpc": "2.0", "id": 4, "result": {"sessionId": "s2"}}
    with pytest.raises(SchemaViolation, match="'session/fork', which is not an agent method"):
        _validate(response, "session/fork", "stable")
    assert unstable_feature(response, "session/fork") == "the response to 'session/fork'"
    validate_agent_message(response, "session/fork")
    # the same answer to a stable method of another shape is not let through by the unstable schema
    with pytest.raises(SchemaViolation, match="'session/frobnicate', which is not an agent method"):
        validate_agent_message(response, "session/frobnicate")


def test_a_malformed_session_fork_response_fails_on_both_schemas() -> None:
    with pytest.raises(SchemaViolation) as raised:
        validate_agent_message({"jsonrpc": "2.0", "id": 4, "result": {"modes": 3}}, "session/fork")
    text = str(raised.value)
    assert "which is not an agent method (stable schema)" in text
    assert "the response to 'session/fork' is unstable-only, and the unstable schema rejects it too" in text
    assert "session/fork result violates the unstable ACP schema (ForkSessionResponse)" in text


def test_an_unstable_only_update_kind_passes_through_the_unstable_schema() -> None:
    message = update("plan_removed", planId="p1")
    with pytest.raises(SchemaViolation, match="violates the stable ACP schema"):
        _validate(message, None, "stable")
    assert unstable_feature(message, None) == "the session update 'plan_removed'"
    validate_agent_message(message, None)
    with pytest.raises(SchemaViolation, match="the unstable schema rejects it too"):
        validate_agent_message(update("plan_removed"), None)


def test_an_unknown_update_kind_fails() -> None:
    message = update("telepathy", content={"type": "text", "text": "hi"})
    assert unstable_feature(message, None) is None
    with pytest.raises(
        SchemaViolation, match=r'"telepathy" at update/sessionUpdate is none of "user_message_chunk"'
    ) as raised:
        validate_agent_message(message, None)
    assert '"notice"' in str(raised.value)  # the known kinds are listed
    assert "unstable schema" not in str(raised.value)


def test_unknown_methods_fail() -> None:
    with pytest.raises(SchemaViolation, match="unknown client method 'fs/delete'"):
        validate_agent_message({"jsonrpc": "2.0", "id": 1, "method": "fs/delete", "params": {}}, None)
    with pytest.raises(SchemaViolation, match="unknown notification 'session/poke'"):
        validate_agent_message({"jsonrpc": "2.0", "method": "session/poke", "params": {}}, None)
    validate_agent_message({"jsonrpc": "2.0", "method": "_refagent/anything", "params": {}}, None)
