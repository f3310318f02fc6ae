// A small ACP client built on the official TypeScript SDK (@agentclientprotocol/sdk), for
// tests/e2e/test_real_clients.py. It spawns an agent, runs one session with the given prompts, answers the
// agent's requests as told, and prints what happened as one JSON object on stdout.
//
//   node sdk-client.mjs --cwd DIR [--permission allow|reject|cancel] [--fs none|allow|refuse-write]
//                       [--cancel-after-update] [--prompt TEXT]... -- AGENT COMMAND...
//
// --permission  which option to pick for session/request_permission (allow_once, reject_once) or answer
//               "cancelled" (default: allow)
// --fs          the fs capabilities to advertise: none; allow (read and write the real files); refuse-write
//               (advertise both, but answer fs/write_text_file with a JSON-RPC error, as acpx can)
// --cancel-after-update   send session/cancel once the turn has started (its first message chunk or tool call)
//
// Output: {initialize, sessionId, turns: [{prompt, stopReason, updates}], permissionRequests, fsRequests}

import { spawn } from "node:child_process";
import { readFile, writeFile } from "node:fs/promises";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

function parseArgs(argv) {
  const options = { cwd: process.cwd(), permission: "allow", fs: "none", cancelAfterUpdate: false, prompts: [] };
  const split = argv.indexOf("--");
  if (split < 0 || split === argv.length - 1) throw new Error("usage: sdk-client.mjs [options] -- AGENT COMMAND...");
  const own = argv.slice(0, split);
  options.agent = argv.slice(split + 1);
  for (let i = 0; i < own.length; i++) {
    const flag = own[i];
    if (flag === "--cwd") options.cwd = own[++i];
    else if (flag === "--permission") options.permission = own[++i];
    else if (flag === "--fs") options.fs = own[++i];
    else if (flag === "--prompt") options.prompts.push(own[++i]);
    else if (flag === "--cancel-after-update") options.cancelAfterUpdate = true;
    else throw new Error(`unknown option ${flag}`);
  }
  if (options.prompts.length === 0) options.prompts.push("hello");
  return options;
}

const options = parseArgs(process.argv.slice(2));
const report = { turns: [], permissionRequests: [], fsRequests: [] };

const agentProcess = spawn(options.agent[0], options.agent.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
const exited = new Promise((resolve) => agentProcess.on("exit", (code, signal) => resolve({ code, signal })));
const stream = acp.ndJsonStream(Writable.toWeb(agentProcess.stdin), Readable.toWeb(agentProcess.stdout));

function pick(params, kind) {
  const option = params.options.find((o) => o.kind === kind);
  if (!option) throw acp.RequestError.invalidParams(undefined, `no ${kind} option offered`);
  return { outcome: { outcome: "selected", optionId: option.optionId } };
}

const client = acp
  .client({ name: "refagent-sdk-test" })
  .onRequest("session/request_permission", async ({ params }) => {
    report.permissionRequests.push(params);
    if (options.permission === "cancel") return { outcome: { outcome: "cancelled" } };
    return pick(params, options.permission === "reject" ? "reject_once" : "allow_once");
  })
  .onRequest("fs/read_text_file", async ({ params }) => {
    report.fsRequests.push({ method: "fs/read_text_file", path: params.path });
    const text = await readFile(params.path, "utf8");
    const lines = text.split(/(?<=\n)/);
    const start = Math.max(1, params.line ?? 1) - 1;
    const chosen = params.limit ? lines.slice(start, start + params.limit) : lines.slice(start);
    return { content: chosen.join("") };
  })
  .onRequest("fs/write_text_file", async ({ params }) => {
    report.fsRequests.push({ method: "fs/write_text_file", path: params.path });
    if (options.fs === "refuse-write") {
      throw new acp.RequestError(-32000, "This client does not let agents write files");
    }
    await writeFile(params.path, params.content, "utf8");
    return {};
  });

const fs = options.fs === "none" ? { readTextFile: false, writeTextFile: false } : { readTextFile: true, writeTextFile: true };

try {
  await client.connectWith(stream, async (agent) => {
    report.initialize = await agent.request("initialize", {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: { fs, terminal: false },
      clientInfo: { name: "refagent-sdk-test", version: "1" },
    });
    // The SDK's session helper queues this session's updates in arrival order, then the turn's stop.
    const session = await agent.buildSession(options.cwd).start();
    report.sessionId = session.sessionId;
    for (const text of options.prompts) {
      const updates = [];
      const prompted = session.prompt(text);
      let cancelled = false;
      for (;;) {
        const message = await session.nextUpdate();
        if (message.kind === "stop") {
          report.turns.push({ prompt: text, stopReason: message.stopReason, updates });
          break;
        }
        updates.push(message.update);
        const kind = message.update.sessionUpdate;
        if (options.cancelAfterUpdate && !cancelled && (kind === "agent_message_chunk" || kind === "tool_call")) {
          cancelled = true;
          await agent.notify("session/cancel", { sessionId: session.sessionId });
        }
      }
      await prompted;
    }
  });
} catch (error) {
  report.error = String(error?.message ?? error);
}
agentProcess.stdin.end(); // EOF: the agent shuts down
report.exit = await exited;
process.stdout.write(JSON.stringify(report) + "\n");
process.exit(report.error ? 1 : 0);
