"""Validates every message the agent sends against the official ACP v1 JSON schema.

The schemas are the ones the TypeScript SDK ``@agentclientprotocol/sdk`` 2.4.0 ships
(``tests/data/acp-schema/sdk-2.4.0/v1/``, see its ``SOURCE.md``): ``schema.json`` (stable v1) and
``schema.unstable.json`` (stable v1 plus the unstable features).

Each message is checked twice against one schema: the envelope against the schema's top level, and the
payload against the exact ``$defs`` type for its method (requests and notifications by their own method,
responses by the method of the request they answer), found through the schema's ``x-side``/``x-method``
annotations.

Stable first, unstable only for unstable features. Every message is validated against the stable schema.
If the stable schema rejects it, the message is accepted only if both hold:

- it belongs to an *unstable-only* feature: a request or notification the agent sends whose method, or a
  response whose answered method, exists only in the unstable schema (e.g. the response to
  ``session/fork``), or a ``session/update`` whose ``sessionUpdate`` kind exists only in the unstable
  schema (e.g. ``plan_update``). Both sets are read from the two schemas' ``$defs`` (``x-method``
  annotations and the ``SessionUpdate`` variants), not listed by hand;
- the unstable schema accepts the whole message (envelope and payload).

Otherwise the stable error is raised (with the unstable error added when the unstable schema was tried).
A message of a stable method or update kind never falls back to the unstable schema. The schemas' objects
are open (no ``additionalProperties: false``), so an unstable field on a stable message passes as is.

Validators are built once per schema and ``$defs`` type. An error names the field and the schema; a failed
``oneOf`` (a session update, a content block, a stop reason) is explained by the branch its tag selects,
or, for an unknown tag, by the known ones (``_explain``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Any, Literal

import jsonschema_rs

from refagent.testing.transcript import Transcript

SCHEMA_DIR = Path(__file__).parents[1] / "data" / "acp-schema" / "sdk-2.4.0" / "v1"
SCHEMA_PATH = SCHEMA_DIR / "schema.json"
UNSTABLE_SCHEMA_PATH = SCHEMA_DIR / "schema.unstable.json"

Flavour = Literal["stable", "unstable"]
_PATHS: dict[Flavour, Path] = {"stable": SCHEMA_PATH, "unstable": UNSTABLE_SCHEMA_PATH}


class SchemaViolation(AssertionError):
    pass


@cache
def _schema(flavour: Flavour = "stable") -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(_PATHS[flavour].read_text(encoding="utf-8"))
    return schema


def validator_in(schema: dict[str, Any], definition: str | None) -> Any:
    """A validator for the ``$defs`` type ``definition`` of ``schema`` (None: the whole schema, the envelope)."""
    if definition is None:
        return jsonschema_rs.validator_for(schema)
    return jsonschema_rs.validator_for({"$ref": f"#/$defs/{definition}", "$defs": schema["$defs"]})


def definitions_in(schema: dict[str, Any]) -> dict[tuple[str, str, str], str]:
    """(side, method, Request|Response|Notification) -> the ``$defs`` name, from the ``x-side`` and
    ``x-method`` annotations of ``schema``."""
    found: dict[tuple[str, str, str], str] = {}
    for name, definition in schema["$defs"].items():
        method = definition.get("x-method")
        if method is None:
            continue
        for kind in ("Request", "Response", "Notification"):
            if name.endswith(kind):
                found[(definition.get("x-side", ""), method, kind)] = name
    return found


@cache
def _validator(definition: str | None, flavour: Flavour = "stable") -> Any:
    return validator_in(_schema(flavour), definition)


@cache
def _definitions(flavour: Flavour = "stable") -> dict[tuple[str, str, str], str]:
    return definitions_in(_schema(flavour))


@cache
def _update_kinds(flavour: Flavour) -> frozenset[str]:
    """The ``sessionUpdate`` kinds of the schema's ``SessionUpdate`` variants."""
    variants = _schema(flavour)["$defs"]["SessionUpdate"]["oneOf"]
    return frozenset(variant["properties"]["sessionUpdate"]["const"] for variant in variants)


@cache
def unstable_only_methods() -> frozenset[tuple[str, str, str]]:
    """(side, method, kind) that only the unstable schema has, e.g. ``("agent", "session/fork", "Response")``."""
    return frozenset(_definitions("unstable").keys() - _definitions("stable").keys())


@cache
def unstable_only_update_kinds() -> frozenset[str]:
    """``session/update`` kinds that only the unstable schema has, e.g. ``plan_update``."""
    return _update_kinds("unstable") - _update_kinds("stable")


def unstable_feature(message: dict[str, Any], answered: str | None) -> str | None:
    """What makes ``message`` a message of an unstable-only feature, or ``None`` if it is not one."""
    methods = unstable_only_methods()
    method = message.get("method")
    if isinstance(method, str):
        kind = "Request" if "id" in message else "Notification"
        if ("client", method, kind) in methods:
            return f"the {kind.lower()} {method!r}"
        params = message.get("params")
        if method == "session/update" and kind == "Notification" and isinstance(params, dict):
            update = params.get("update")
            if isinstance(update, dict) and update.get("sessionUpdate") in unstable_only_update_kinds():
                return f"the session update {update['sessionUpdate']!r}"
        return None
    if "result" in message and answered is not None and ("agent", answered, "Response") in methods:
        return f"the response to {answered!r}"
    return None


def _where(error: Any) -> str:
    return "/".join(map(str, error.instance_path)) or "(top)"


def _missed_constant(error: Any) -> bool:
    """Whether ``error`` says a ``oneOf``/``anyOf`` branch's constant (its discriminator) does not match."""
    path = error.schema_path
    if not isinstance(error.kind, jsonschema_rs.ValidationErrorKind.Constant) or len(path) < 2:
        return False
    # a tagged branch (properties.<tag>.const, e.g. sessionUpdate, a content block's type) or a bare one
    return (len(path) >= 3 and path[-3] == "properties") or isinstance(path[-2], int)


def _explain(error: Any, depth: int = 0) -> list[str]:
    """``error`` in words; a failed ``oneOf``/``anyOf`` by the branches its constants select.

    "not valid under any of the schemas listed in the 'oneOf' keyword" names no field. The branches whose
    constant (e.g. ``sessionUpdate``, a content block's ``type``, a ``stopReason``) does not match are
    dropped; one or two left are explained instead; none left means an unknown value, reported with the
    known ones.
    """
    kind = error.kind
    branches = getattr(kind, "context", None)
    alternatives = (jsonschema_rs.ValidationErrorKind.OneOfNotValid, jsonschema_rs.ValidationErrorKind.AnyOf)
    if depth < 4 and isinstance(kind, alternatives) and branches:
        kept = [branch for branch in branches if not any(_missed_constant(e) for e in branch)]
        if 1 <= len(kept) <= 2:
            return [line for branch in kept for e in branch for line in _explain(e, depth + 1)]
        if not kept:
            missed = [e for branch in branches for e in branch if _missed_constant(e)]
            expected = ", ".join(dict.fromkeys(json.dumps(e.kind.expected_value) for e in missed))
            return [f"{json.dumps(missed[0].instance)} at {_where(missed[0])} is none of {expected}"]
    return [f"{error.message} at {_where(error)}"]


def _check(definition: str | None, value: Any, what: str, flavour: Flavour) -> None:
    errors = list(_validator(definition, flavour).iter_errors(value))
    if errors:
        lines = list(dict.fromkeys(line for e in errors[:5] for line in _explain(e)))
        details = "; ".join(lines[:8])
        raise SchemaViolation(
            f"{what} violates the {flavour} ACP schema ({definition or 'envelope'}): {details}\n{value!r}"[:4000]
        )


def _validate(message: dict[str, Any], answered: str | None, flavour: Flavour) -> None:
    _check(None, message, "message", flavour)
    defs = _definitions(flavour)
    if "method" in message:
        method = message["method"]
        params = message.get("params", {})
        if method == "$/cancel_request":
            _check("CancelRequestNotification", params, method, flavour)
        elif "id" in message:
            name = defs.get(("client", method, "Request"))
            if name is None:
                raise SchemaViolation(
                    f"the agent sent a request for an unknown client method {method!r} ({flavour} schema)"
                )
            _check(name, params, method, flavour)
        else:
            name = defs.get(("client", method, "Notification"))
            if name is None and not method.startswith("_"):
                raise SchemaViolation(f"the agent sent an unknown notification {method!r} ({flavour} schema)")
            if name is not None:
                _check(name, params, method, flavour)
        return
    if "error" in message:
        _check("Error", message["error"], "error", flavour)
        return
    if answered is None:
        raise SchemaViolation(f"the agent answered a request nobody sent: {message!r}")
    if answered.startswith("_"):  # an extension method (ExtResponse: any JSON); ours all answer an object
        if not isinstance(message.get("result"), dict):
            raise SchemaViolation(f"the agent answered the extension method {answered!r} with no object")
        return
    name = defs.get(("agent", answered, "Response"))
    if name is None:
        raise SchemaViolation(f"the agent answered {answered!r}, which is not an agent method ({flavour} schema)")
    _check(name, message.get("result"), f"{answered} result", flavour)


def validate_agent_message(message: dict[str, Any], answered: str | None) -> None:
    """Raise :class:`SchemaViolation` unless ``message`` (sent by the agent) is valid ACP v1.

    ``answered`` is the method of the request a response answers (``None`` for requests and
    notifications). Stable schema first; the unstable one only for unstable-only features (module docstring).
    """
    stable_else_unstable(_validate, unstable_feature, message, answered)


def stable_else_unstable(
    validate: Callable[[dict[str, Any], str | None, Flavour], None],
    feature: Callable[[dict[str, Any], str | None], str | None],
    message: dict[str, Any],
    answered: str | None,
) -> None:
    """``validate`` the message against the stable schema; for an unstable-only feature (``feature`` names
    it, None for any other), against the unstable one when the stable one rejects it. Raise
    :class:`SchemaViolation` with both reasons when neither takes it."""
    try:
        validate(message, answered, "stable")
    except SchemaViolation as stable_error:
        named = feature(message, answered)
        if named is None:
            raise
        try:
            validate(message, answered, "unstable")
        except SchemaViolation as unstable_error:
            raise SchemaViolation(
                f"{stable_error}\n{named} is unstable-only, and the unstable schema rejects it too: {unstable_error}"
            ) from unstable_error


def validate_agent_message_unstable(message: dict[str, Any], answered: str | None) -> None:
    """:func:`validate_agent_message`, and the whole message against the unstable schema too: the check of
    tests of unstable features, whose every message (stable ones included) must be valid there as well."""
    validate_agent_message(message, answered)
    _validate(message, answered, "unstable")


def checked_wire(lines: Iterable[str]) -> Transcript:
    """A client's wire transcript read back (``refagent run --json``, ``open_agent``'s ``transcript``: one
    ``{"from": "client"|"agent", "message"}`` a line), every message the agent sent checked against the
    schema as it is recorded. A line the agent sent that was not JSON (``{"line"}``) fails the test."""
    transcript = Transcript(check=validate_agent_message)
    for line in lines:
        entry = json.loads(line)
        assert "message" in entry, f"a line on the wire that is not JSON: {entry}"
        transcript.record(entry["from"], json.dumps(entry["message"]).encode())
    return transcript
