// An operator client of a running OpenClaw Gateway, for tests/openclaw_harness.py.
//
// It connects with OpenClaw's own GatewayClient (the public plugin-sdk export
// `openclaw/plugin-sdk/gateway-runtime` of the installed, pinned package) the
// way `openclaw tui` does: client id `openclaw-tui`, mode `ui`, scopes
// operator.admin/read/write/approvals, caps agent-kind, plugin-approvals,
// task-suggestions, tool-events; then `sessions.subscribe {}` as the TUI does.
//
// Every event frame the client's socket delivers (everything but the
// pre-connect `connect.challenge`, which carries no session content) is
// appended to the events file as one JSON line `{"event": <frame>}`, in
// arrival order, before anything else happens with it; a gap in the
// Gateway's per-connection sequence numbers is recorded as `{"gap": ...}`.
//
// stdout: one JSON line per happening: `{"hello": {scopes}}` once connected,
// `{"connect_error": message}`, `{"closed": code}`, and one
// `{"id", "ok", "payload"|"error"}` answer per request. stdin: one JSON line
// per request `{"id", "method", "params"}` (e.g. `sessions.messages.subscribe`,
// `chat.history`). SIGTERM stops the client and exits.
//
// Usage: node openclaw_operator.mjs '{"package": <openclaw package dir>,
//   "url": "ws://127.0.0.1:<port>", "token": <gateway token>, "events": <path>}'
import fs from "node:fs";
import readline from "node:readline";
import { pathToFileURL } from "node:url";

const config = JSON.parse(process.argv[2]);
const runtime = pathToFileURL(`${config.package}/dist/plugin-sdk/gateway-runtime.js`).href;
const { GatewayClient } = await import(runtime);

const record = (line) => fs.appendFileSync(config.events, `${JSON.stringify(line)}\n`);
const say = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

const client = new GatewayClient({
  url: config.url,
  token: config.token,
  clientName: "openclaw-tui",
  clientDisplayName: "smf-operator-probe",
  mode: "ui",
  role: "operator",
  scopes: ["operator.admin", "operator.read", "operator.write", "operator.approvals"],
  caps: ["agent-kind", "plugin-approvals", "task-suggestions", "tool-events"],
  minProtocol: 4,
  maxProtocol: 4,
  onEvent: (frame) => record({ event: frame }),
  onGap: (info) => record({ gap: info }),
  onHelloOk: (hello) => {
    client
      .request("sessions.subscribe", {})
      .then(() => say({ hello: { scopes: hello?.auth?.scopes ?? [] } }))
      .catch((error) => say({ connect_error: `sessions.subscribe: ${error}` }));
  },
  onConnectError: (error) => say({ connect_error: String(error?.message ?? error) }),
  onClose: (code) => say({ closed: code }),
});

readline.createInterface({ input: process.stdin }).on("line", (line) => {
  if (!line.trim()) return;
  const { id, method, params } = JSON.parse(line);
  client
    .request(method, params ?? {})
    .then((payload) => say({ id, ok: true, payload }))
    .catch((error) => say({ id, ok: false, error: String(error?.message ?? error) }));
});

process.on("SIGTERM", () => {
  client
    .stopAndWait({ timeoutMs: 5000 })
    .catch(() => client.stop())
    .finally(() => process.exit(0));
});

client.start();
