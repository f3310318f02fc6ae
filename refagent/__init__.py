"""refagent: a reference coding agent for the Agent Client Protocol (ACP v1)."""

__version__ = "0.1.0"
