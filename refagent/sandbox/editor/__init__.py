"""The editor's side of a session's backends, over the agent-side client (:mod:`refagent.acp.client`): its
files (:mod:`~refagent.sandbox.editor.files`), its terminals (:mod:`~refagent.sandbox.editor.terminals`)
and questions for the user (:mod:`~refagent.sandbox.editor.questions`). A session's sandbox decides
whether its files and terminals are used, and wraps them in its own path policy and confinement
(:class:`refagent.sandbox.local.Sandbox`)."""
