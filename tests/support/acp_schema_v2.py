"""Validates every message the agent sends to a v2 client against the ACP v2 draft schema
(``tests/data/acp-schema/sdk-2.4.0/v2/schema.json``, see its ``SOURCE.md``), strictly.

The draft accepts unknown values in every enum and tagged union (the branches titled ``other``): valid as
that is for a client to receive, it would let a misspelt ``sessionUpdate`` or ``stopReason`` of ours pass.
Those branches are removed before validating, so only the values the draft names are accepted.

As for v1 (:mod:`tests.support.acp_schema`), a message is checked twice: the envelope against the schema's
top level, and the payload against the ``$defs`` type of its method (the answered method, for a response).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from tests.support.acp_schema import SchemaViolation, definitions_in, validator_in

SCHEMA_PATH = Path(__file__).parents[1] / "data" / "acp-schema" / "sdk-2.4.0" / "v2" / "schema.json"


def _strict(node: Any) -> Any:
    """``node`` without the ``other`` branches of its ``anyOf``s (recursively)."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _strict(value) for key, value in node.items()}
    branches = out.get("anyOf")
    if isinstance(branches, list):
        kept = [b for b in branches if not (isinstance(b, dict) and b.get("title") == "other")]
        if kept and len(kept) < len(branches):
            out["anyOf"] = kept
    return out


@cache
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = _strict(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))
    return schema


@cache
def _validator(definition: str | None) -> Any:
    return validator_in(_schema(), definition)


@cache
def _definitions() -> dict[tuple[str, str, str], str]:
    return definitions_in(_schema())


def _check(definition: str | None, value: Any, what: str) -> None:
    errors = list(_validator(definition).iter_errors(value))
    if errors:
        details = "; ".join(f"{e.message} at {'/'.join(map(str, e.instance_path)) or '(top)'}" for e in errors[:5])
        raise SchemaViolation(
            f"{what} violates the ACP v2 schema ({definition or 'envelope'}): {details}\n{value!r}"[:4000]
        )


def validate_agent_message_v2(message: dict[str, Any], answered: str | None) -> None:
    """Raise :class:`SchemaViolation` unless ``message`` (sent by the agent) is valid ACP v2."""
    _check(None, message, "message")
    defs = _definitions()
    if "method" in message:
        method = message["method"]
        params = message.get("params", {})
        kind = "Request" if "id" in message else "Notification"
        name = "CancelRequestNotification" if method == "$/cancel_request" else defs.get(("client", method, kind))
        if name is None and not method.startswith("_"):
            raise SchemaViolation(f"the agent sent an unknown v2 {kind.lower()} {method!r}")
        if name is not None:
            _check(name, params, method)
        return
    if "error" in message:
        _check("Error", message["error"], "error")
        return
    if answered is None:
        raise SchemaViolation(f"the agent answered a request nobody sent: {message!r}")
    if answered.startswith("_"):
        return
    name = defs.get(("agent", answered, "Response"))
    if name is None:
        raise SchemaViolation(f"the agent answered {answered!r}, which is not a v2 agent method")
    _check(name, message.get("result"), f"{answered} result")
