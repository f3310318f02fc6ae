"""Command confinement: what this machine can do, the launcher every command starts through, and local
processes. Empty on purpose: the launcher imports this package with ``python -I -S``, before anything else."""
