"""A custom tool in one file: ``outline`` lists the classes and functions of a Python file, with their line
numbers, so the model can find its way in a big file without reading all of it.

A tool is a :class:`~refagent.tools.base.BaseTool` with a name, a description and a JSON schema for the
model, an ACP kind for the editor (``read``: it changes nothing, so it never asks permission), a title,
and :meth:`prepare`, which checks the arguments and returns a :class:`~refagent.tools.base.Plan`. The
runner shows the call in the editor, asks permission if the plan says it changes something, then runs
``plan.execute``. Errors the model can fix are :class:`~refagent.errors.ToolError`\\ s: the model reads
the message and tries again. Files are read through ``ctx.files`` (the editor's buffers when it offers
them, else the disk) after the sandbox's path policy has resolved and checked the path.
"""

from __future__ import annotations

import ast
from typing import Any, ClassVar

from refagent.errors import ToolError
from refagent.tools.base import BaseTool, Plan, ToolContext, ToolResult


class Outline(BaseTool):
    name = "outline"
    description = (
        "List the classes, functions and methods of a Python file with their line numbers and signatures. "
        "Use it to find your way in a large file, then read_file with an offset to read one part."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"path": {"type": "string", "description": "A .py file, relative to the working directory."}},
        "required": ["path"],
        "additionalProperties": False,
    }
    kind = "read"

    def title(self, args: dict[str, Any]) -> str:
        return f"Outline {args.get('path', '')}"

    async def prepare(self, args: dict[str, Any], ctx: ToolContext) -> Plan:
        resolved = ctx.policy.resolve(str(args["path"]))
        if not resolved.path.endswith(".py"):
            raise ToolError(f"{resolved.display} is not a Python file; outline reads .py files only.")

        async def execute() -> ToolResult:
            try:
                source = await ctx.files.read_text(resolved.path)
            except FileNotFoundError:
                raise ToolError(f"File not found: {resolved.display}") from None
            try:
                tree = ast.parse(source)
            except SyntaxError as exc:
                raise ToolError(f"{resolved.display} does not parse: {exc.msg} (line {exc.lineno})") from None
            lines = outline(tree)
            return ToolResult(
                "\n".join(lines) or f"{resolved.display} defines no classes or functions.",
                raw_output={"path": resolved.path, "entries": len(lines)},
            )

        return Plan(
            title=f"Outline {resolved.display}",
            execute=execute,
            locations=[{"path": resolved.path, "line": 1}],
            outside=not resolved.inside,  # reading outside the workspace asks first, as read_file does
        )


def outline(tree: ast.Module) -> list[str]:
    """``line: def name(args)`` for each class and function, methods indented under their class."""
    found: list[str] = []

    def visit(nodes: list[ast.stmt], depth: int) -> None:
        for node in nodes:
            if isinstance(node, ast.ClassDef):
                found.append(f"{node.lineno:>5}: {'    ' * depth}class {node.name}")
                visit(node.body, depth + 1)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
                found.append(f"{node.lineno:>5}: {'    ' * depth}{prefix} {node.name}({ast.unparse(node.args)})")

    visit(tree.body, 0)
    return found
