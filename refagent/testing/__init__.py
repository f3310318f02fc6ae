"""Fakes shipped with the package, for refagent's tests and for anyone building on it.

- :mod:`refagent.llm.scripted`: a :class:`~refagent.llm.protocol.ModelClient` that plays a script.
- :mod:`refagent.testing.memory`: an in-memory editor (client) wired to an agent over anyio memory streams.
"""
