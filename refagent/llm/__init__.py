"""Models: the :class:`~refagent.llm.protocol.ModelClient` seam, model profiles, and the OpenAI-compatible adapter.

Nothing here imports ``openai`` at module level: it costs ~0.8 s and the editor is waiting on ``initialize``.
"""
