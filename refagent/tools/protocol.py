"""What the prompt turn needs from tools: :class:`ToolRunner` (implemented by
:class:`refagent.tools.runner.ToolRunner`)."""

from __future__ import annotations

from typing import Protocol

from refagent.llm.protocol import ToolCallRequest, ToolSpec


class ToolRunner(Protocol):
    """Runs the model's tool calls for a session."""

    def specs(self) -> list[ToolSpec]: ...

    async def run(self, call: ToolCallRequest) -> str:
        """Run ``call``, reporting it to the editor; return the result text the model reads.

        Errors the model can fix are returned as text, not raised. Only cancellation propagates.
        """
        ...


class NoTools:
    """A runner with no tools."""

    def specs(self) -> list[ToolSpec]:
        return []

    async def run(self, call: ToolCallRequest) -> str:
        return f"Error: there is no tool named {call.name!r}."
