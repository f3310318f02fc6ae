"""The terminal side of ACP: ``refagent run`` (:mod:`refagent.client.run`), the ``make demo`` driver
(:mod:`refagent.client.demo`), how both answer the agent (:mod:`refagent.client.handler`) and draw a
session (:mod:`refagent.client.render`).

It is a client like an editor: it talks to the agent only through ACP, over the pipes of a ``refagent``
process it starts. Nothing in the agent imports it.
"""
