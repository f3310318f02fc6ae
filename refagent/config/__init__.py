"""Configuration: what the agent is made with, read from the config file, the environment and the command
line. No model client is made and no tool imported here: the configuration only names them.

The room's modules, one job each:

- :mod:`~refagent.config.file`: where the config file is, reading its TOML, taking values out of it checked;
- :mod:`~refagent.config.flags`: the command-line flags and the environment variables;
- :mod:`~refagent.config.profiles`: the model profiles as configured (``[profiles.NAME]``, or the one the
  environment forms), their keys and names;
- :mod:`~refagent.config.providers`: the providers by name (``provider/model``, a key variable alone, what
  is known of common models), from the package's ``providers.json`` and the file's ``[providers]``;
- :mod:`~refagent.config.clients`: the kinds of model client a profile names (``client = "openai"``), a
  registry of factories a fork adds to, and the one place a client is made from a profile;
- :mod:`~refagent.config.limits`: how hard a turn may try (``max_requests``, ``[retry]``);
- :mod:`~refagent.config.custom_tools`: the custom tools the file names (``tools``, ``tool_path``);
- :mod:`~refagent.config.allowed`: what the user allows beyond the editor's: MCP servers of their own
  (``[mcp_servers.NAME]``), a project's ``.mcp.json`` servers by name, trusted projects, ``[fetch] allow``;
- :mod:`~refagent.config.loading`: :class:`Config` and :func:`load`, the layers combined;
- :mod:`~refagent.config.writer`: writing the file (``refagent login``, ``refagent logout``, ACP ``logout``),
  imported only by them.

The file, all of it (each module's docstring says more of its part)::

    default_profile = "work"      # else the first profile
    max_requests = 50             # model requests per prompt turn
    tools = ["outline:Outline"]   # custom tools, "module:Class" (refagent.tools.custom)
    tool_path = ["tools"]         # where their modules are, relative to this file (default: none)

    [retry]                       # transient failures (429, 5xx, lost connections)
    attempts = 4                  # total, the first included
    base_delay = 1.0              # seconds; doubled each time, with jitter

    [profiles.work]               # the id shown in the editor's model picker
    client = "openai"             # the kind of model client (default: openai; also anthropic, scripted, demo, a fork's)
    base_url = "https://api.example.com/v1"   # default: OpenAI's
    api_key_env = "EXAMPLE_API_KEY"           # or api_key = "..." (api_key = "": no key needed)
    model = "gpt-4.1"             # default: the first model the endpoint lists
    name = "Work: GPT-4.1"        # display name (default: the model and host)
    context_window = 1047576
    images = true
    input_price = 2.0             # per million tokens
    output_price = 8.0
    currency = "USD"
    reasoning_effort = ["low", "medium", "high"]   # the efforts the model accepts, in order (default: none)
    default_reasoning_effort = "medium"            # default: "medium" if listed, else the first

Importing the package loads what :func:`load` needs and nothing heavier (no ``tomllib`` without a file, no
model client, no tool): it runs before the editor's first answer (``tests/server/test_startup_imports.py``).
"""

from refagent.config.file import CONFIG_ENV, config_path, default_config_path
from refagent.config.flags import add_arguments
from refagent.config.loading import Config, config_file, load
from refagent.config.profiles import DEFAULT_OPENAI_MODEL
from refagent.llm.profiles import missing_key

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_OPENAI_MODEL",
    "Config",
    "add_arguments",
    "config_file",
    "config_path",
    "default_config_path",
    "load",
    "missing_key",
]
