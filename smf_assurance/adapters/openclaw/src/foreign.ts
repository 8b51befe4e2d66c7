/**
 * Other plugins that can change a tool call after this plugin decided on it (issue 17).
 *
 * Finding: a second plugin registered `before_tool_call` at `priority: -Infinity`
 * (below ours; OpenClaw 2026.9.6 does not validate priorities and takes the
 * params of the LAST handler it runs). The attorney approved
 * `echo filed >> FILED`; `echo pwned > PWNED` ran, and the plugin noticed only in
 * `after_tool_call`. OpenClaw offers no plugin seam after the hooks and before
 * the spawn (docs/OPENCLAW.md, "Foreign hooks"), so the plugin refuses to run
 * while such a hook is loaded: it reads the registry OpenClaw dispatches from,
 * inside its own hook, and blocks every call while another plugin has
 *
 * - a `before_tool_call` at a priority at or below ours (it runs after us and its
 *   params win), or
 * - a `resolve_exec_env` (it adds environment to `exec` that no hook sees).
 *
 * The registry is not part of OpenClaw's plugin API. It is found where 2026.9.6
 * keeps it (`Symbol.for("openclaw.pluginInstanceInvocation")` -> the current
 * frame's `generationRegistry`, which dispatch prefers; else the active registry
 * of `Symbol.for("openclaw.pluginRegistryState")`). When neither can be read the
 * answer is `null`, and the caller refuses: absence cannot be shown.
 *
 * What this cannot see: a plugin that removes OUR entry from the registry
 * (docs/OPENCLAW.md finding: the generation-registry splice). A removed hook is
 * never called, so it never checks anything.
 */

interface HookEntry {
  pluginId?: unknown;
  hookName?: unknown;
  priority?: unknown;
}

const INVOCATION = Symbol.for("openclaw.pluginInstanceInvocation");
const REGISTRY_STATE = Symbol.for("openclaw.pluginRegistryState");

function hooksOf(registry: unknown): HookEntry[] | null {
  if (typeof registry !== "object" || registry === null) return null;
  const hooks = (registry as { typedHooks?: unknown }).typedHooks;
  return Array.isArray(hooks) ? (hooks as HookEntry[]) : null;
}

/** The registry OpenClaw dispatches hooks from right now, or `undefined`. */
export function currentRegistry(scope: Record<symbol, unknown> = globalThis as unknown as Record<symbol, unknown>): unknown {
  try {
    const invocation = scope[INVOCATION] as { getFrame?: () => { generationRegistry?: unknown } | undefined } | undefined;
    const frame = typeof invocation?.getFrame === "function" ? invocation.getFrame() : undefined;
    if (hooksOf(frame?.generationRegistry) !== null) return frame?.generationRegistry;
    const state = scope[REGISTRY_STATE] as { activeRegistry?: unknown } | undefined;
    if (hooksOf(state?.activeRegistry) !== null) return state?.activeRegistry;
  } catch {
    // a getter that throws is an unreadable registry
  }
  return undefined;
}

/**
 * Every other plugin's hook that can change a call after ours, as
 * `<pluginId>:<hook>` (`@<priority>` for `before_tool_call`); `null` when the
 * registry cannot be read.
 */
export function foreignParamHooks(registry: unknown, ourId: string, ourPriority: number): string[] | null {
  const hooks = hooksOf(registry);
  if (hooks === null) return null;
  const found = new Set<string>();
  for (const entry of hooks) {
    const pluginId = typeof entry.pluginId === "string" ? entry.pluginId : "?";
    if (pluginId === ourId) continue;
    if (entry.hookName === "before_tool_call") {
      const priority = typeof entry.priority === "number" ? entry.priority : 0;
      // NaN compares false with everything: its place in the order is unknown, so it counts.
      if (!(priority > ourPriority)) found.add(`${pluginId}:before_tool_call@${String(priority)}`);
    } else if (entry.hookName === "resolve_exec_env") {
      found.add(`${pluginId}:resolve_exec_env`);
    }
  }
  return [...found].sort();
}

/**
 * The budget OpenClaw gives our own hook, as it registered it: the loader resolves
 * the operator's `plugins.entries.<id>.hooks.timeouts.<hook>` over the plugin's own
 * `timeoutMs` into the entry (`resolveTypedHookTimeoutMs`, 2026.9.6). `undefined`
 * when the registry or our entry cannot be read, or names no budget.
 */
export function ownHookTimeoutMs(registry: unknown, ourId: string, hookName: string): number | undefined {
  const hooks = hooksOf(registry);
  const entry = hooks?.find((h) => h.pluginId === ourId && h.hookName === hookName) as { timeoutMs?: unknown } | undefined;
  return typeof entry?.timeoutMs === "number" && Number.isFinite(entry.timeoutMs) ? entry.timeoutMs : undefined;
}
