// Drive the compiled plugin's hooks from another process (tests/runtimes/test_openclaw_plugin.py).
//
// The plugin is loaded exactly as OpenClaw loads it (the default export of
// dist/index.js) and registered against a stand-in for the part of
// OpenClaw's plugin API it uses (api.on, api.pluginConfig, api.runtime.version,
// api.logger). No OpenClaw here: tests/runtimes/test_openclaw_conformance.py drives the
// real runtime. Protocol: one JSON command per stdin line, one JSON answer per
// stdout line, matched by "id"; commands run concurrently, so a held call can
// wait while the test resolves its approval.
//
//   {"id": 1, "op": "register", "config": {...}, "runtimeVersion": "2026.9.6"}
//   {"id": 2, "op": "before", "event": {...}, "ctx": {...}}   -> {"id": 2, "result": {...}}
//   {"id": 3, "op": "after", "event": {...}, "ctx": {...}}    -> {"id": 3, "result": null}
//   {"id": 4, "op": "subscribe", "subject": "smf.execute.>"}  -> {"id": 4, "result": {"subscribed": bool, "reason": str|null}}
//   {"id": 5, "op": "foreign", "pluginId": "rogue", "hookName": "before_tool_call", "priority": -1e308}
//   {"id": 6, "op": "close"}
//
// The stand-in also keeps the hook registry where OpenClaw 2026.9.6 keeps the one
// it dispatches from (src/foreign.ts): every api.on lands there under our plugin
// id, and "foreign" adds another plugin's hook, as a second plugin would.
//
// "subscribe" asks the plugin's own shared connection (the one its hooks use,
// with the credential of the registered config) for a subscription.
import { createInterface } from "node:readline";
import plugin, { shutdown } from "../dist/index.js";
import { readConfig } from "../dist/config.js";
import { sharedBus } from "../dist/transport.js";

const hooks = { before_tool_call: [], after_tool_call: [] };
const registrations = [];
let registered;
const registry = { typedHooks: [] };
globalThis[Symbol.for("openclaw.pluginInstanceInvocation")] = {
  getFrame: () => ({ generationRegistry: registry }),
};

function answer(message) {
  process.stdout.write(JSON.stringify(message) + "\n");
}

// OpenClaw records each hook with the source file it loaded the plugin from, and tells
// the plugin that file as `api.source`; the plugin knows its own hooks by it.
const SOURCE = new URL("../dist/index.js", import.meta.url).pathname;

function api(config, runtimeVersion) {
  return {
    source: SOURCE,
    pluginConfig: config,
    registrationMode: "full",
    runtime: { version: runtimeVersion },
    logger: {
      info: (m) => process.stderr.write(`[info] ${m}\n`),
      warn: (m) => process.stderr.write(`[warn] ${m}\n`),
      error: (m) => process.stderr.write(`[error] ${m}\n`),
    },
    on(name, handler, opts) {
      hooks[name]?.push(handler);
      registry.typedHooks.push({ pluginId: plugin.id, hookName: name, handler, priority: opts?.priority, timeoutMs: opts?.timeoutMs, source: SOURCE });
      registrations.push({ hook: name, priority: opts?.priority ?? null, timeoutMs: opts?.timeoutMs ?? null });
    },
  };
}

async function run(command) {
  switch (command.op) {
    case "register":
      registered = command.config;
      plugin.register(api(command.config, command.runtimeVersion ?? "2026.9.6"));
      return { id: plugin.id, registrations };
    case "before": {
      // The LAST registration's handler, as a reloaded plugin's would be called.
      const handler = hooks.before_tool_call.at(command.registration ?? -1);
      return await handler(command.event, command.ctx ?? {});
    }
    case "after": {
      const handler = hooks.after_tool_call.at(command.registration ?? -1);
      await handler(command.event, command.ctx ?? {});
      return null;
    }
    case "subscribe": {
      const { config } = readConfig(registered);
      if (config === undefined) return { subscribed: false, reason: "not_configured" };
      try {
        const inbox = await sharedBus(config.natsUrl, config.credential, config.busCa).subscribe(command.subject);
        inbox.close();
        return { subscribed: true, reason: null };
      } catch (error) {
        return { subscribed: false, reason: error?.reasonCode ?? String(error) };
      }
    }
    case "foreign":
      registry.typedHooks.push({ pluginId: command.pluginId, hookName: command.hookName, handler: () => undefined, priority: command.priority, source: command.source ?? "/elsewhere/rogue/index.js" });
      return { hooks: registry.typedHooks.length };
    case "close":
      await shutdown();
      setImmediate(() => process.exit(0));
      return null;
    default:
      throw new Error(`unknown op ${command.op}`);
  }
}

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  let command;
  try {
    command = JSON.parse(line);
  } catch {
    answer({ id: null, error: "not JSON" });
    return;
  }
  run(command).then(
    (result) => answer({ id: command.id, result: result ?? null }),
    (error) => answer({ id: command.id, error: String(error?.stack ?? error) }),
  );
});
lines.on("close", () => {
  shutdown().finally(() => process.exit(0));
});
