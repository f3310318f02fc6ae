"""The sandbox a session gets (:class:`~refagent.sandbox.local.Sandbox`): its path policy, disk, search,
terminals, read tracking and watcher, and how the editor's files and terminals are joined to them. The
standard one is :func:`~refagent.sandbox.local.local_sandbox`; a fork passes its own through
``Settings.make_sandbox`` (``docs/forking.md``, "Replace the sandbox")."""
