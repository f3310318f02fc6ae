"""The package's rooms import one way, and no module imports itself back through others.

Every ``import`` of a refagent module counts, wherever it is written: at the top, inside a function
(deferred for start-up speed) or under ``TYPE_CHECKING``. The rooms and their order are the ones
``docs/architecture.md`` describes; a room may import only rooms below it (and itself).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import refagent

PACKAGE = Path(refagent.__file__).resolve().parent

RANKS = {
    # the shared leaves: no refagent imports of their own but each other's
    "acp": 0,
    "errors": 0,
    "ids": 0,
    "prompts": 0,
    "sandbox.within": 0,
    "dirs": 0,
    "logs": 0,
    "heartbeat": 0,
    "child": 0,
    # below the tools: the model, the saved sessions
    "llm": 1,
    "persistence": 1,
    "sandbox.holding": 1,  # the levels, and how far a sandbox holds commands: plain words, imports nothing
    # the configuration (the file, flags and environment, profiles, limits, the model client kinds): it
    # names the model's clients and the tools, and needs only the model's room
    "config": 2,
    # the sandbox, one building: its seams (protocols) at the door, then the rooms that implement them, then
    # the assembly that joins them (sandbox.local)
    "sandbox.seams": 2,
    "sandbox.disk": 3,
    "sandbox.search": 4,
    "sandbox.confine": 4,
    "sandbox.editor": 5,
    "sandbox": 6,
    "tools": 7,
    "mcp": 8,
    "settings": 9,
    "session": 10,
    "server": 11,
    # programs and fakes built on the agent
    "testing": 12,
    "client": 12,
    "cli": 13,
    "__main__": 14,
    "__init__": 0,
}
"""The rank of each room (a package, or a top-level module). Equal ranks may not import each other."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """The refagent modules ``path`` imports, anywhere in it (``from refagent.x import y`` counts
    ``refagent.x.y`` when that is a module, else ``refagent.x``)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("refagent"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if not base.startswith("refagent"):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in MODULES else base)
    found.discard(name)
    return found


# Not refagent/demo-project/: the demo project is data (its directory is no identifier), not a module of the package.
MODULES = {
    module_name(path): path
    for path in PACKAGE.rglob("*.py")
    if all(part.isidentifier() for part in path.relative_to(PACKAGE).parent.parts)
}
GRAPH = {name: imports_of(path) for name, path in MODULES.items()}


def room(module: str) -> str:
    """A package or top-level module of refagent; inside the sandbox, one of its rooms (sandbox.disk...)."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "sandbox" and f"sandbox.{parts[2]}" in RANKS:
        return f"sandbox.{parts[2]}"
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_room_has_a_rank() -> None:
    assert {room(m) for m in MODULES} <= set(RANKS), "a new room: give it its place in RANKS and the docs"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_only_rooms_below_its_own(module: str) -> None:
    own = room(module)
    upward = sorted(
        target
        for target in GRAPH[module]
        if target in MODULES and room(target) != own and RANKS[room(target)] >= RANKS[own]
    )
    assert upward == [], f"{module} ({own}, rank {RANKS[own]}) imports upwards or sideways: {upward}"


def test_no_import_cycles() -> None:
    """Tarjan's strongly connected components over every import: each must be a single module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH.get(node, ()):
            if target not in MODULES:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in sorted(MODULES):
        if name not in index:
            visit(name)
    assert cycles == []


def test_the_sandbox_imports_nothing_of_the_tools() -> None:
    """The seams (file system, terminal, policy) live with their implementations, below the tools."""
    offenders = {m: sorted(t for t in GRAPH[m] if room(t) == "tools") for m in MODULES if room(m) == "sandbox"}
    assert {m: t for m, t in offenders.items() if t} == {}
