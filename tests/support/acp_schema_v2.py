"""Validates every message the agent sends to a v2 client against the ACP v2 draft schemas
(``tests/data/acp-schema/sdk-2.4.0/v2/``, see its ``SOURCE.md``), strictly.

The draft accepts unknown values in every enum and tagged union (the branches titled ``other``): valid as
that is for a client to receive, it would let a misspelt ``sessionUpdate`` or ``stopReason`` of ours pass.
Those branches are removed before validating, so only the values the draft names are accepted.

As for v1 (:mod:`tests.support.acp_schema`), a message is checked twice: the envelope against the schema's
top level, and the payload against the ``$defs`` type of its method (the answered method, for a response);
and stable first, the unstable schema only for an unstable-only feature (a method, or a ``session/update``
kind, that only ``schema.unstable.json`` has: ``session/fork``'s response, ``plan_removed``), read from the
two schemas, not listed by hand. A message of a stable method or kind never falls back to the unstable one.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, Literal

from tests.support.acp_schema import SchemaViolation, definitions_in, stable_else_unstable, validator_in

SCHEMA_DIR = Path(__file__).parents[1] / "data" / "acp-schema" / "sdk-2.4.0" / "v2"
SCHEMA_PATH = SCHEMA_DIR / "schema.json"
UNSTABLE_SCHEMA_PATH = SCHEMA_DIR / "schema.unstable.json"

Flavour = Literal["stable", "unstable"]
_PATHS: dict[Flavour, Path] = {"stable": SCHEMA_PATH, "unstable": UNSTABLE_SCHEMA_PATH}


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
def _schema(flavour: Flavour = "stable") -> dict[str, Any]:
    schema: dict[str, Any] = _strict(json.loads(_PATHS[flavour].read_text(encoding="utf-8")))
    return schema


@cache
def _validator(definition: str | None, flavour: Flavour = "stable") -> Any:
    return validator_in(_schema(flavour), definition)


@cache
def _definitions(flavour: Flavour = "stable") -> dict[tuple[str, str, str], str]:
    return definitions_in(_schema(flavour))


@cache
def update_kinds(flavour: Flavour = "stable") -> frozenset[str]:
    """The ``sessionUpdate`` kinds the schema names (its ``other`` branch removed)."""
    variants = _schema(flavour)["$defs"]["SessionUpdate"]["anyOf"]
    return frozenset(variant["properties"]["sessionUpdate"]["const"] for variant in variants)


@cache
def methods(flavour: Flavour = "stable") -> frozenset[tuple[str, str, str]]:
    """(side, method, Request|Response|Notification) of every method the schema has."""
    return frozenset(_definitions(flavour))


def _unstable_feature(message: dict[str, Any], answered: str | None) -> str | None:
    only = methods("unstable") - methods("stable")
    method = message.get("method")
    if isinstance(method, str):
        kind = "Request" if "id" in message else "Notification"
        if ("client", method, kind) in only:
            return f"the {kind.lower()} {method!r}"
        params = message.get("params")
        if method == "session/update" and isinstance(params, dict) and isinstance(params.get("update"), dict):
            update = params["update"].get("sessionUpdate")
            if update in update_kinds("unstable") - update_kinds("stable"):
                return f"the session update {update!r}"
        return None
    if "result" in message and answered is not None and ("agent", answered, "Response") in only:
        return f"the response to {answered!r}"
    return None


def _check(definition: str | None, value: Any, what: str, flavour: Flavour) -> None:
    errors = list(_validator(definition, flavour).iter_errors(value))
    if errors:
        details = "; ".join(f"{e.message} at {'/'.join(map(str, e.instance_path)) or '(top)'}" for e in errors[:5])
        raise SchemaViolation(
            f"{what} violates the {flavour} ACP v2 schema ({definition or 'envelope'}): {details}\n{value!r}"[:4000]
        )


def _validate(message: dict[str, Any], answered: str | None, flavour: Flavour) -> None:
    _check(None, message, "message", flavour)
    defs = _definitions(flavour)
    if "method" in message:
        method = message["method"]
        params = message.get("params", {})
        kind = "Request" if "id" in message else "Notification"
        name = "CancelRequestNotification" if method == "$/cancel_request" else defs.get(("client", method, kind))
        if name is None and not method.startswith("_"):
            raise SchemaViolation(f"the agent sent an unknown v2 {kind.lower()} {method!r} ({flavour} schema)")
        if name is not None:
            _check(name, params, method, flavour)
        return
    if "error" in message:
        _check("Error", message["error"], "error", flavour)
        return
    if answered is None:
        raise SchemaViolation(f"the agent answered a request nobody sent: {message!r}")
    if answered.startswith("_"):
        return
    name = defs.get(("agent", answered, "Response"))
    if name is None:
        raise SchemaViolation(f"the agent answered {answered!r}, which is not a v2 agent method ({flavour} schema)")
    _check(name, message.get("result"), f"{answered} result", flavour)


def validate_agent_message_v2(message: dict[str, Any], answered: str | None) -> None:
    """Raise :class:`SchemaViolation` unless ``message`` (sent by the agent) is valid ACP v2: stable, or
    unstable for an unstable-only feature (module docstring)."""
    stable_else_unstable(_validate, _unstable_feature, message, answered)
