"""A minimal ACP client, to read line by line: it starts refagent, shakes hands, opens a session, sends
one prompt, and prints what comes back. Standard library only.

    python examples/minimal_client.py "your prompt" [--cwd DIR]

ACP is JSON-RPC 2.0, one JSON object per line, over the agent's stdin and stdout. Both sides send
requests: while our ``session/prompt`` is pending, the agent may ask *us* for permission, and we must
answer for the turn to go on.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any


class MinimalClient:
    def __init__(self, command: list[str]) -> None:
        # The agent's stderr is its log: let it through to ours.
        self.agent = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.next_id = 0

    def send(self, message: dict[str, Any]) -> None:
        assert self.agent.stdin is not None
        self.agent.stdin.write(json.dumps(message) + "\n")
        self.agent.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> Any:
        """Send a request and read messages until its response arrives, handling the others meanwhile."""
        request_id = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        assert self.agent.stdout is not None
        for line in self.agent.stdout:
            message = json.loads(line)
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise RuntimeError(f"{method} failed: {message['error']['message']}")
                return message["result"]
            if "method" in message and "id" in message:
                self.answer(message)
            elif message.get("method") == "session/update":
                show(message["params"]["update"])
        raise RuntimeError("the agent exited")

    def answer(self, request: dict[str, Any]) -> None:
        """Answer a request from the agent. This client allows once, and supports nothing else."""
        if request["method"] == "session/request_permission":
            options = request["params"]["options"]
            chosen = next(o for o in options if o["kind"] == "allow_once")
            print(f"  [permission asked: {request['params']['toolCall'].get('title', '?')} -> {chosen['name']}]")
            result = {"outcome": {"outcome": "selected", "optionId": chosen["optionId"]}}
            self.send({"jsonrpc": "2.0", "id": request["id"], "result": result})
        else:
            error = {"code": -32601, "message": f"Method not found: {request['method']}"}
            self.send({"jsonrpc": "2.0", "id": request["id"], "error": error})

    def close(self) -> int:
        assert self.agent.stdin is not None
        self.agent.stdin.close()  # EOF on stdin is how an ACP client shuts the agent down
        return self.agent.wait(timeout=5)


def show(update: dict[str, Any]) -> None:
    kind = update["sessionUpdate"]
    if kind in ("agent_message_chunk", "agent_thought_chunk"):
        text = update["content"].get("text", "")
        print(text if kind == "agent_message_chunk" else f"\x1b[2m{text}\x1b[0m", end="", flush=True)
    elif kind == "tool_call":
        print(f"\n  [{update.get('kind', 'other')}] {update['title']} ({update.get('status', 'pending')})")
    elif kind == "tool_call_update" and update.get("status"):
        print(f"  [{update['toolCallId'][-6:]}] {update['status']}")
    elif kind == "plan":
        for entry in update["entries"]:
            print(f"  plan: [{entry['status']}] {entry['content']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prompt")
    parser.add_argument("--cwd", default=os.getcwd())
    args = parser.parse_args()

    client = MinimalClient([sys.executable, "-m", "refagent"])
    init = client.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    print(f"connected to {init['agentInfo']['name']} {init['agentInfo']['version']} (ACP v{init['protocolVersion']})")
    session = client.request("session/new", {"cwd": os.path.abspath(args.cwd), "mcpServers": []})
    model = next(o for o in session.get("configOptions", []) if o["id"] == "model")
    print(f"session {session['sessionId']} with model {model['currentValue']!r}\n> {args.prompt}")
    prompt = [{"type": "text", "text": args.prompt}]
    result = client.request("session/prompt", {"sessionId": session["sessionId"], "prompt": prompt})
    print(f"\n[stop reason: {result['stopReason']}]")
    return client.close()


if __name__ == "__main__":
    raise SystemExit(main())
