/**
 * The OpenClaw plugin `smf-assurance`: every tool call is proposed to the SMF
 * gate, signed with the runtime's key, and runs only with the exact params the
 * gate allowed. Pinned runtime: npm `openclaw@2026.9.6`.
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

import { Governance } from "./attest.js";
import { InstanceProver, processBinding, PROVIDER_ID, type ProcessBinding, type StreamFn } from "./binding.js";
import { readConfig } from "./config.js";
import { ADAPTER_ID, GateAdapter, type BeforeResult, type Logger, type ToolContext, type ToolEvent } from "./gate.js";
import { currentRegistry, foreignParamHooks, ownHookTimeoutMs } from "./foreign.js";
import { closeSharedBuses, sharedBus } from "./transport.js";

export const PLUGIN_ID = "smf-assurance";
/** Every source file OpenClaw registered this plugin from, in this process (`api.source`). */
export const OWN_SOURCES: Set<string> = new Set();
export const OPENCLAW_PIN = "2026.9.6";
/** Lowest safe priority: OpenClaw runs higher priorities first and takes the last params. */
export const HOOK_PRIORITY = Number.MIN_SAFE_INTEGER;
/** OpenClaw caps hook budgets at 600 000 ms (plugins.entries.<id>.hooks.timeouts). */
export const MAX_HOOK_TIMEOUT_MS = 600_000;
const HOOK_MARGIN_MS = 5_000;

/** The part of OpenClaw's plugin API this plugin uses (`OpenClawPluginApi`, 2026.9.6). */
export interface PluginApi {
  pluginConfig?: Record<string, unknown>;
  /** OpenClaw's whole config; read only for the operator's hook timeout override. */
  config?: unknown;
  registrationMode?: string;
  /** The plugin's source file as OpenClaw recorded it (2026.9.6 `buildPluginApi`); every hook entry it registers names it. */
  source?: string;
  runtime?: { version?: unknown };
  logger?: Partial<Logger>;
  on(
    hookName: "before_tool_call" | "after_tool_call",
    handler: (event: ToolEvent, ctx: ToolContext) => Promise<BeforeResult | void>,
    opts?: { priority?: number; timeoutMs?: number },
  ): void;
  /** A provider plugin's hooks (`ProviderPlugin`, 2026.9.6); absent: no proof is ever sent, and the gateway refuses. */
  registerProvider?(provider: ProviderRegistration): void;
}

/** The part of OpenClaw's `ProviderPlugin` this plugin registers. */
export interface ProviderRegistration {
  id: string;
  label: string;
  auth: never[];
  wrapStreamFn(ctx: { streamFn?: StreamFn }): StreamFn | undefined;
  wrapSimpleCompletionStreamFn(ctx: { streamFn?: StreamFn }): StreamFn | undefined;
}

const adapters = new Map<string, GateAdapter>();
const governances = new Map<GateAdapter, Governance>();

/** Stop every attestation loop and close every connection (tests and process shutdown). */
export async function shutdown(): Promise<void> {
  for (const governance of governances.values()) governance.stop();
  await closeSharedBuses();
}

/** The before_tool_call budget for these timeouts: the gate round trips plus the longest approval wait. */
export function neededHookMs(gateTimeoutMs: number, holdTimeoutMs: number): number {
  return 2 * gateTimeoutMs + holdTimeoutMs + HOOK_MARGIN_MS;
}

/**
 * The operator's budget for our `before_tool_call`, when OpenClaw shows its config:
 * `plugins.entries.smf-assurance.hooks.timeouts.before_tool_call`, else the plugin's
 * `hooks.timeoutMs` (the order OpenClaw's loader applies, `resolveTypedHookTimeoutMs`).
 * What OpenClaw actually registered is checked again at call time (`foreign.ts`).
 */
function operatorHookTimeout(api: PluginApi): number | undefined {
  try {
    const entries = (api.config as { plugins?: { entries?: Record<string, unknown> } } | undefined)?.plugins?.entries;
    const hooks = (entries?.[PLUGIN_ID] as { hooks?: { timeouts?: { before_tool_call?: unknown }; timeoutMs?: unknown } } | undefined)?.hooks;
    for (const value of [hooks?.timeouts?.before_tool_call, hooks?.timeoutMs]) {
      if (typeof value === "number" && Number.isFinite(value) && value > 0) return value;
    }
    return undefined;
  } catch {
    return undefined;
  }
}

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
  if (config !== undefined) {
    // OpenClaw blocks a hook past its budget: a budget shorter than the longest
    // approval wait would end held calls early (the allow-once then spent unused).
    const needed = neededHookMs(config.gateTimeoutMs, config.holdTimeoutMs);
    const override = operatorHookTimeout(api);
    if (needed > MAX_HOOK_TIMEOUT_MS || (override !== undefined && override < needed)) {
      reasons.push("hook_timeout_below_approval_wait");
      details.push(`the before_tool_call budget ${Math.min(override ?? MAX_HOOK_TIMEOUT_MS, MAX_HOOK_TIMEOUT_MS)} ms is below the ${needed} ms a held call may wait`);
    }
  }
  if (reasons.length > 0) {
    log.error(
      `SMF Assurance adapter REFUSES to run (${details.join("; ")}). ` +
        "Every tool call will be BLOCKED until this is fixed.",
    );
  }
  const bus = config === undefined ? undefined : sharedBus(config.natsUrl, config.credential, config.busCa);
  const governance =
    config === undefined || bus === undefined
      ? undefined
      : new Governance(
          {
            runtimeId: config.runtimeId,
            runtimeVersion: version,
            runtimePin: OPENCLAW_PIN,
            adapterId: ADAPTER_ID,
            key: config.key,
            trustRoot: config.trustRoot,
            gateTimeoutMs: config.gateTimeoutMs,
            attestIntervalMs: config.attestIntervalMs,
          },
          bus,
          log,
        );
  if (governance !== undefined) governance.problems = [...new Set(reasons)];
  const adapter = new GateAdapter(
    config === undefined || governance === undefined
      ? undefined
      : {
          runtimeId: config.runtimeId,
          runtimeVersion: version,
          key: config.key,
          governance,
          context: config.context,
          gateTimeoutMs: config.gateTimeoutMs,
          holdTimeoutMs: config.holdTimeoutMs,
          protected: config.protected,
          inspect: () => foreignParamHooks(currentRegistry(), OWN_SOURCES, HOOK_PRIORITY),
          hookBudget: {
            effectiveMs: () => ownHookTimeoutMs(currentRegistry(), OWN_SOURCES, "before_tool_call"),
            neededMs: neededHookMs(config.gateTimeoutMs, config.holdTimeoutMs),
          },
        },
    [...new Set(reasons)],
    bus,
    log,
  );
  adapters.set(fingerprint, adapter);
  if (governance !== undefined) governances.set(adapter, governance);
  return adapter;
}

/** The before_tool_call budget: the gate round trips plus the longest approval wait. */
export function hookTimeoutMs(adapter: GateAdapter): number {
  const s = adapter.settings;
  const budget = s === undefined ? 30_000 : neededHookMs(s.gateTimeoutMs, s.holdTimeoutMs);
  return Math.min(budget, MAX_HOOK_TIMEOUT_MS);
}

/** What this process has seen of its registrations (one per process; tests pass their own). */
export interface RegistrationsSeen {
  full: boolean;
  warned: boolean;
}

/**
 * Process-wide, on `globalThis`: OpenClaw 2026.9.6 registers the plugin from more than
 * one module instance per process (run: with a module-level record, `agent --local`
 * printed the warning below twice, after its full registration had attested).
 */
function processRegistrations(): RegistrationsSeen {
  const holder = globalThis as unknown as Record<symbol, RegistrationsSeen | undefined>;
  const key = Symbol.for("smf-assurance.registrations-seen");
  return (holder[key] ??= { full: false, warned: false });
}

/**
 * OpenClaw's `agent exec` registers plugins in "discovery" mode only and never
 * calls their hooks (docs/OPENCLAW.md finding 1): nothing this plugin does can
 * gate its tools. Say so, once, where the operator reads; the model gateway is
 * what refuses such a process (it never attests). `agent --local` also
 * registers in discovery mode, after a full registration: no warning then.
 */
export function warnIfUngated(api: PluginApi, seen: RegistrationsSeen = processRegistrations()): boolean {
  if (api.registrationMode === "full") seen.full = true;
  if (api.registrationMode !== "discovery" || seen.full || seen.warned) return false;
  seen.warned = true;
  logger(api).error(
    "SMF Assurance adapter: OpenClaw loaded this plugin in discovery mode only (openclaw agent exec); " +
      "its hooks are never called, so tool calls in this process are NOT gated. Use agent --local or the Gateway.",
  );
  return true;
}

/**
 * The provider `smf-gateway`: its stream wrappers put this process's
 * instance proof on every model request to it (`binding.ts`), or nothing. The
 * operator configures the model gateway under this id; any other id gets no proof
 * and is refused by the gateway. Registered in every mode, because OpenClaw calls
 * the provider hooks of a discovery registration; whether to sign is decided per
 * request from process state. A factory that fails returns no wrapper: OpenClaw's
 * own stream then sends no proof.
 */
export function provider(api: PluginApi, binding: ProcessBinding = processBinding()): ProviderRegistration {
  const prover = new InstanceProver(binding, logger(api));
  const wrap = (ctx: { streamFn?: StreamFn } | undefined, mayWait: boolean): StreamFn | undefined => {
    try {
      return prover.wrap(ctx?.streamFn, mayWait);
    } catch {
      return undefined;
    }
  };
  return {
    id: PROVIDER_ID,
    label: "SMF model gateway",
    auth: [],
    wrapStreamFn: (ctx) => wrap(ctx, true),
    wrapSimpleCompletionStreamFn: (ctx) => wrap(ctx, false),
  };
}

/** Note a full registration in this process's binding: the one thing that lets the wrapper sign. */
export function noteRegistration(api: PluginApi, binding: ProcessBinding = processBinding()): void {
  if (api.registrationMode === "full") binding.full = true;
}

function register(api: PluginApi): void {
  try {
    noteRegistration(api);
    api.registerProvider?.(provider(api));
  } catch (error) {
    // No provider: requests to smf-gateway go without a proof and are refused.
    try {
      process.stderr.write(`[smf-assurance] failed to register its provider: ${String(error)}\n`);
    } catch {
      // stay silent rather than throw
    }
  }
  try {
    warnIfUngated(api);
    const adapter = adapterFor(api);
    const before = (event: ToolEvent, ctx: ToolContext): Promise<BeforeResult> =>
      adapter.beforeToolCall(event ?? {}, ctx ?? {});
    const after = async (event: ToolEvent, ctx: ToolContext): Promise<void> => {
      await adapter.afterToolCall(event ?? {}, ctx ?? {});
    };
    // OpenClaw records our hooks under the source it loaded us from: an entry is
    // ours only if it names one of these (foreign.ts), never by the id it names.
    if (typeof api.source === "string") OWN_SOURCES.add(api.source);
    api.on("before_tool_call", before, { priority: HOOK_PRIORITY, timeoutMs: hookTimeoutMs(adapter) });
    api.on("after_tool_call", after, { priority: HOOK_PRIORITY });
    // Start-up attestation (attest.ts): the hooks are in place, say so. A "full"
    // registration attests now and periodically (one loop per adapter, however
    // often register() runs); any other registration only once one of its hooks
    // is actually called (`Governance.ensure` starts the loop then). OpenClaw
    // also registers plugins in "discovery" mode, where no hook is ever called
    // (`openclaw agent exec` does only that: RUNTIMES.md, docs/OPENCLAW.md
    // finding 1), so such a process never attests.
    const governance = governances.get(adapter);
    if (governance !== undefined) {
      governance.hooksPresent = ["after_tool_call", "before_tool_call"];
      if (api.registrationMode === "full") governance.start();
    }
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
