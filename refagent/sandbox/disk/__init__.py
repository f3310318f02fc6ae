"""The local file system: the path policy, the disk, read tracking, the watcher of the roots, and the
.gitignore and glob rules they share (``docs/architecture.md``, "The rooms")."""
