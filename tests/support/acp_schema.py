"""Validates every message the agent sends against the official ACP v1 JSON schema.

Each message is checked twice: the envelope against the schema's top level, and the payload against the
exact ``$defs`` type for its method (requests and notifications by their own method, responses by the
method of the request they answer), found through the schema's ``x-side``/``x-method`` annotations.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema_rs

SCHEMA_PATH = Path(__file__).parents[1] / "data" / "acp-schema" / "v1" / "schema.json"


class SchemaViolation(AssertionError):
    pass


@cache
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


@cache
def _validator(definition: str | None) -> Any:
    schema = _schema()
    if definition is None:
        return jsonschema_rs.validator_for(schema)
    return jsonschema_rs.validator_for({"$ref": f"#/$defs/{definition}", "$defs": schema["$defs"]})


@cache
def _definitions() -> dict[tuple[str, str, str], str]:
    """(side, method, Request|Response|Notification) -> $defs name."""
    found: dict[tuple[str, str, str], str] = {}
    for name, definition in _schema()["$defs"].items():
        method = definition.get("x-method")
        if method is None:
            continue
        for kind in ("Request", "Response", "Notification"):
            if name.endswith(kind):
                found[(definition.get("x-side", ""), method, kind)] = name
    return found


def _check(definition: str | None, value: Any, what: str) -> None:
    errors = list(_validator(definition).iter_errors(value))
    if errors:
        details = "; ".join(f"{e.message} at {'/'.join(map(str, e.instance_path))}" for e in errors[:5])
        raise SchemaViolation(
            f"{what} violates the ACP schema ({definition or 'envelope'}): {details}\n{value!r}"[:4000]
        )


def validate_agent_message(message: dict[str, Any], answered: str | None) -> None:
    """Raise :class:`SchemaViolation` unless ``message`` (sent by the agent) is valid ACP v1."""
    _check(None, message, "message")
    defs = _definitions()
    if "method" in message:
        method = message["method"]
        params = message.get("params", {})
        if method == "$/cancel_request":
            _check("CancelRequestNotification", params, method)
        elif "id" in message:
            name = defs.get(("client", method, "Request"))
            if name is None:
                raise SchemaViolation(f"the agent sent a request for an unknown client method {method!r}")
            _check(name, params, method)
        else:
            name = defs.get(("client", method, "Notification"))
            if name is None and not method.startswith("_"):
                raise SchemaViolation(f"the agent sent an unknown notification {method!r}")
            if name is not None:
                _check(name, params, method)
        return
    if "error" in message:
        _check("Error", message["error"], "error")
        return
    if answered is None:
        raise SchemaViolation(f"the agent answered a request nobody sent: {message!r}")
    name = defs.get(("agent", answered, "Response"))
    if name is None:
        raise SchemaViolation(f"the agent answered {answered!r}, which is not an agent method")
    _check(name, message.get("result"), f"{answered} result")
