/**
 * The OpenClaw plugin `smf-assurance`: every tool call is proposed to the SMF
 * gate, signed with the runtime's key, and runs only with the exact params the
 * gate allowed (issue 10). Pinned runtime: npm `openclaw@2026.9.6`.
 *
 * Seam facts (RUNTIMES.md, "OpenClaw", run on the pinned version):
 * - `register(api)` runs several times per process: nothing connects here;
 *   one adapter and one NATS connection per configuration are shared by every
 *   registration and made lazily by the first hook call (`transport.ts`).
 * - `before_tool_call` fails closed on a throw or a timeout, but every path of
 *   ours returns an explicit block anyway (`gate.ts`).
 * - Every handler gets a copy of the ORIGINAL params and the LAST returned
 *   params win; the hook therefore runs at the lowest priority and returns the
 *   params it hashed. A hook registered later at the same or a lower priority
 *   would win instead: `after_tool_call` detects it (executed params differ
 *   from the allowed ones) and reports the broken binding.
 * - `register()` must not throw (a plugin that fails to register leaves tools
 *   unguarded): a configuration problem or a runtime off the pin registers the
 *   hooks in refusing mode, which blocks every call and says why.
 */

import { readConfig } from "./config.js";
import { GateAdapter, type BeforeResult, type Logger, type ToolContext, type ToolEvent } from "./gate.js";
import { sharedBus } from "./transport.js";

export const PLUGIN_ID = "smf-assurance";
export const OPENCLAW_PIN = "2026.9.6";
/** Lowest safe priority: OpenClaw runs higher priorities first and takes the last params. */
export const HOOK_PRIORITY = Number.MIN_SAFE_INTEGER;
/** OpenClaw caps hook budgets at 600 000 ms (plugins.entries.<id>.hooks.timeouts). */
export const MAX_HOOK_TIMEOUT_MS = 600_000;
const HOOK_MARGIN_MS = 5_000;

/** The part of OpenClaw's plugin API this plugin uses (`OpenClawPluginApi`, 2026.9.6). */
export interface PluginApi {
  pluginConfig?: Record<string, unknown>;
  registrationMode?: string;
  runtime?: { version?: unknown };
  logger?: Partial<Logger>;
  on(
    hookName: "before_tool_call" | "after_tool_call",
    handler: (event: ToolEvent, ctx: ToolContext) => Promise<BeforeResult | void>,
    opts?: { priority?: number; timeoutMs?: number },
  ): void;
}

const adapters = new Map<string, GateAdapter>();

function logger(api: PluginApi): Logger {
  const sink = api.logger ?? {};
  const safe = (f: ((m: string) => void) | undefined, fallback: (m: string) => void) => (m: string): void => {
    try {
      (f ?? fallback)(m);
    } catch {
      // A logger that throws must not turn a block into a throw.
    }
  };
  return {
    info: safe(sink.info?.bind(sink), () => undefined),
    warn: safe(sink.warn?.bind(sink), (m) => process.stderr.write(`[smf-assurance] ${m}\n`)),
    error: safe(sink.error?.bind(sink), (m) => process.stderr.write(`[smf-assurance] ${m}\n`)),
  };
}

function runtimeVersion(api: PluginApi): string {
  try {
    const v = api.runtime?.version;
    return typeof v === "string" && v.length > 0 ? v.slice(0, 256) : "unknown";
  } catch {
    return "unknown";
  }
}

/** Build (or reuse) the adapter for this configuration; never throws. */
export function adapterFor(api: PluginApi): GateAdapter {
  const log = logger(api);
  const fingerprint = JSON.stringify(api.pluginConfig ?? null) + "\u0000" + runtimeVersion(api);
  const existing = adapters.get(fingerprint);
  if (existing !== undefined) return existing;
  const version = runtimeVersion(api);
  const { config, problems } = readConfig(api.pluginConfig);
  const reasons = problems.map((p) => p.reasonCode);
  const details = problems.map((p) => `${p.reasonCode}${p.detail ? ` (${p.detail})` : ""}`);
  if (version !== OPENCLAW_PIN) {
    reasons.push("runtime_version_not_pinned");
    details.push(`OpenClaw ${version} is not the pinned ${OPENCLAW_PIN}`);
  }
  if (reasons.length > 0) {
    log.error(
      `SMF Assurance adapter REFUSES to run (${details.join("; ")}). ` +
        "Every tool call will be BLOCKED until this is fixed.",
    );
  }
  const adapter = new GateAdapter(
    config === undefined
      ? undefined
      : {
          runtimeId: config.runtimeId,
          runtimeVersion: version,
          key: config.key,
          gateKeys: config.gateKeys,
          context: config.context,
          gateTimeoutMs: config.gateTimeoutMs,
          holdTimeoutMs: config.holdTimeoutMs,
        },
    [...new Set(reasons)],
    config === undefined ? undefined : sharedBus(config.natsUrl),
    log,
  );
  adapters.set(fingerprint, adapter);
  return adapter;
}

/** The before_tool_call budget: the gate round trips plus the longest approval wait. */
export function hookTimeoutMs(adapter: GateAdapter): number {
  const s = adapter.settings;
  const budget = s === undefined ? 30_000 : 2 * s.gateTimeoutMs + s.holdTimeoutMs + HOOK_MARGIN_MS;
  return Math.min(budget, MAX_HOOK_TIMEOUT_MS);
}

function register(api: PluginApi): void {
  try {
    const adapter = adapterFor(api);
    api.on("before_tool_call", (event, ctx) => adapter.beforeToolCall(event ?? {}, ctx ?? {}), {
      priority: HOOK_PRIORITY,
      timeoutMs: hookTimeoutMs(adapter),
    });
    api.on(
      "after_tool_call",
      async (event, ctx) => {
        await adapter.afterToolCall(event ?? {}, ctx ?? {});
      },
      { priority: HOOK_PRIORITY },
    );
  } catch (error) {
    // Registration itself failed part-way; nothing else can be done from here.
    try {
      process.stderr.write(`[smf-assurance] failed to register its hooks: ${String(error)}\n`);
    } catch {
      // stay silent rather than throw
    }
  }
}

const plugin = {
  id: PLUGIN_ID,
  name: "SMF Assurance",
  description:
    "Proposes every tool call to the SMF Assurance Gate (signed, over NATS) and runs it only with the exact params the gate allowed; holds wait for an attorney's allow-once.",
  register,
};

export default plugin;
