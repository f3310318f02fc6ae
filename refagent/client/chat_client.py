"""The client side of ``refagent chat``'s connection (its :class:`~refagent.acp.connection.Handler`).

Notifications: each ``session/update`` of the chat's session goes to the state (mode, model, usage,
commands, title) and to the view. One that comes between turns (the commands and notices that follow
``session/new``) is printed above the prompt being edited.

Requests: only ``session/request_permission`` (the chat advertises no file system and no terminal, so
``fs/*`` and ``terminal/*`` are ``-32601``). The live region is paused, the view shows the call, and the
answer is one key, the one in brackets before each option, taken without Enter on a terminal
(:meth:`~refagent.client.chat_input.ChatInput.key`): ``y`` allow once, ``a`` always, ``n`` reject once,
``v`` always reject (never); as a line otherwise, as in ``refagent run``
(:data:`~refagent.client.handler.ANSWERS`); ``--yes`` approves. Ctrl-C or Ctrl-D at the
question cancels the turn: the answer is ``cancelled`` and ``on_cancel`` sends ``session/cancel``. After
``session/cancel`` every question, pending or later, answers ``cancelled`` (ACP "Cancellation").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from rich.text import Text

from refagent.acp.errors import MethodNotFound
from refagent.acp.text import visible
from refagent.client.chat_input import ChatInput
from refagent.client.chat_state import ChatState
from refagent.client.chat_view import DRAWN, ChatView
from refagent.client.handler import ANSWERS, cancelled, pick, selected
from refagent.client.render import option_key


class ChatClient:
    """Answers the agent for the chat. ``approve``: approve every request, saying it came from this
    (``--yes``). ``accept``: the session whose updates are drawn (``None``: any, while one is opening)."""

    def __init__(
        self,
        view: ChatView,
        state: ChatState,
        typed: ChatInput,
        on_cancel: Callable[[], Awaitable[None]],
        *,
        approve: str | None = None,
    ) -> None:
        self.view = view
        self.state = state
        self.input = typed
        self.on_cancel = on_cancel
        self.approve = approve
        self.accept: str | None = None
        self.cancelled = False
        self._asking: set[anyio.CancelScope] = set()
        self._one_question = anyio.Lock()

    async def handle_request(self, method: str, params: dict[str, Any]) -> Any:
        if method == "session/request_permission":
            return await self.permission(params)
        raise MethodNotFound(f"Method not found: {method}")  # nothing else was advertised

    async def handle_notification(self, method: str, params: dict[str, Any]) -> None:
        update = params.get("update")
        if method != "session/update" or not isinstance(update, dict):
            return
        if self.accept is not None and params.get("sessionId") != self.accept:
            return  # a session the chat has left
        self.state.apply(update)
        if update.get("sessionUpdate") not in DRAWN:
            return  # the status line reads the state when it is drawn next
        if self.view.active:
            self.view.update(update)  # no await before drawing: updates are drawn in the order they came
            return

        def draw() -> None:
            self.view.update(update)
            self.view.flush()

        await self.input.above(draw)

    def new_turn(self) -> None:
        self.cancelled = False

    def cancel_prompts(self) -> None:
        """``session/cancel`` was sent: pending questions answer ``cancelled``, and so will later ones."""
        self.cancelled = True
        for scope in self._asking:
            scope.cancel()

    async def permission(self, params: dict[str, Any]) -> dict[str, Any]:
        options = [o for o in params.get("options") or [] if isinstance(o, dict)]
        async with self._one_question:  # one question on the screen at a time
            if self.cancelled:
                return cancelled()
            self.view.pause()
            try:
                if self.approve is not None:
                    chosen = pick(options, "allow_once") or pick(options, "allow_always")
                    if chosen is not None:  # one line: what was approved, and by what (no menu to choose from)
                        self.view.approved(params, f"{chosen.get('name')}, {self.approve}")
                        return selected(chosen)
                    self.view.permission(params)
                    self.view.answered("no option allows it: cancelled")
                    return cancelled()
                keys = self.view.permission(params)
                chosen = None
                with anyio.CancelScope() as scope:  # cancel_prompts() cancels it: the answer is "cancelled"
                    self._asking.add(scope)
                    try:
                        chosen = await self._ask(options, keys)
                    finally:
                        self._asking.discard(scope)
                if chosen is None:
                    self.view.answered("cancelled")
                    return cancelled()
                self.view.answered(str(chosen.get("name") or chosen.get("optionId")))
                if str(chosen.get("kind")).startswith("reject"):  # its failure is said for the user, not the model
                    self.view.rejected.add(str((params.get("toolCall") or {}).get("toolCallId", "")))
                return selected(chosen)
            finally:
                self.view.resume()

    async def _ask(self, options: list[dict[str, Any]], keys: str) -> dict[str, Any] | None:
        """The option typed; ``None`` when the user cancelled the turn (Ctrl-C, Ctrl-D) or it was cancelled."""
        while True:
            try:
                answer = await self.input.key(f"    Allow? [{keys}] ", "".join(option_key(o) for o in options))
            except (KeyboardInterrupt, EOFError):
                self.cancelled = True
                await self.on_cancel()
                return None
            if not self.input.echoes:
                self.view.console.print(Text(visible(answer)))  # what was typed, not markup
            chosen = pick(options, ANSWERS.get(answer.strip().lower(), ""))
            if chosen is not None:
                return chosen
            self.view.console.print(Text(f"    Please answer one of: {keys}", style="yellow"))
