#!/bin/sh
# refagent from acpx (https://www.npmjs.com/package/acpx), a headless ACP client for scripts
# (tested in CI with acpx 0.15.1: tests/test_real_clients.py). `--agent` takes any ACP command line.
REFAGENT=refagent   # on PATH after a pipx or uv tool install; else the absolute path `command -v refagent` prints

# one-shot: a temporary session, one prompt, then exit
acpx --agent "$REFAGENT" --approve-all exec "The tests fail. Fix the bug."

# a persistent session in this directory: several prompts, one conversation
acpx --agent "$REFAGENT" sessions new
acpx --agent "$REFAGENT" "What does this project do?"
acpx --agent "$REFAGENT" "Now add a test for the discount."
acpx --agent "$REFAGENT" cancel          # from another terminal: cancel the running prompt

# permissions: --approve-reads (the default: asks for writes, refuses when there is no terminal),
# --approve-all, --deny-all; --format json prints the ACP messages as NDJSON for scripts
acpx --agent "$REFAGENT" --deny-all --format json exec "Refactor the cart"
