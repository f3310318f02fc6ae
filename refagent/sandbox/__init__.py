"""The sandbox: the path policy (pure), the local file system, and local processes."""
