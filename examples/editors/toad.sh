#!/bin/sh
# refagent in Toad (https://github.com/batrachianai/toad), a terminal UI for ACP agents:
#   toad acp COMMAND [PROJECT_DIR]
# COMMAND is one string (Toad runs it through the shell). Toad reads the agent's stderr only after it fails,
# so keep the default log level (warnings) or log to a file, as here.
REFAGENT=refagent   # on PATH after a pipx or uv tool install; else the absolute path `command -v refagent` prints
exec toad acp --title refagent "$REFAGENT --log-file /tmp/refagent.log" "${1:-.}"
