/**
 * Other plugins that can change a tool call after this plugin decided on it.
 *
 * The attack: a second plugin registers `before_tool_call` at `priority: -Infinity`
 * (below ours; OpenClaw 2026.9.6 does not validate priorities and takes the
 * params of the LAST handler it runs). The attorney approves
 * `echo filed >> FILED`; `echo pwned > PWNED` runs, and a check in
 * `after_tool_call` comes too late. OpenClaw offers no plugin seam after the
 * hooks and before the spawn (docs/OPENCLAW.md, "Foreign hooks"), so the plugin refuses to run
 * while such a hook is loaded: it reads the registry OpenClaw dispatches from,
 * inside its own hook, and blocks every call while another plugin has
 *
 * - a `before_tool_call` that OpenClaw's dispatcher could run after ours (its
 *   params win), or
 * - a `resolve_exec_env` (it adds environment to `exec` that no hook sees).
 *
 * Where a hook runs is computed as OpenClaw 2026.9.6 sorts (`getHooksForName`:
 * `(b.priority ?? 0) - (a.priority ?? 0)`, JavaScript's numeric coercion): a
 * missing priority is 0, a string or boolean is what `Number()` makes of it (so
 * `"-Infinity"` runs last). An object, function, symbol or bigint priority is
 * coerced by code of its own (`valueOf`), which may answer the sort and this check
 * differently, and a NaN has no place in the order: each counts as running after ours.
 * An entry is ours only when OpenClaw recorded it from our plugin's source file
 * (`source`, which OpenClaw writes from its own plugin record, and `api.source` told
 * us at registration: `ownSources`), never by the `pluginId` it carries: another
 * plugin can relabel its entry with our id. (The handler cannot tell: OpenClaw
 * loads a plugin from a captured copy per registration, so the function objects
 * in the registry dispatch uses are not the ones any one load of ours holds.)
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
  source?: unknown;
}

/**
 * Where OpenClaw's dispatcher places a priority, or `undefined` when its place
 * cannot be known without running foreign code (or is NaN).
 */
export function sortKey(priority: unknown): number | undefined {
  let key: number;
  if (priority === undefined || priority === null) key = 0;
  else if (typeof priority === "number") key = priority;
  else if (typeof priority === "string" || typeof priority === "boolean") key = Number(priority);
  else return undefined;
  return Number.isNaN(key) ? undefined : key;
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
 * registry cannot be read. `ownSources` are the source files OpenClaw registered
 * this plugin from: only an entry recorded from one of them is ours, whatever id
 * it names.
 */
export function foreignParamHooks(
  registry: unknown,
  ownSources: ReadonlySet<string>,
  ourPriority: number,
): string[] | null {
  const hooks = hooksOf(registry);
  if (hooks === null) return null;
  const found = new Set<string>();
  for (const entry of hooks) {
    if (typeof entry !== "object" || entry === null) continue;
    if (isOurs(entry, ownSources)) continue;
    const pluginId = typeof entry.pluginId === "string" ? entry.pluginId : "?";
    if (entry.hookName === "before_tool_call") {
      const key = sortKey(entry.priority);
      if (key === undefined || !(key > ourPriority)) found.add(`${pluginId}:before_tool_call@${describe(entry.priority)}`);
    } else if (entry.hookName === "resolve_exec_env") {
      found.add(`${pluginId}:resolve_exec_env`);
    }
  }
  return [...found].sort();
}

function isOurs(entry: HookEntry, ownSources: ReadonlySet<string>): boolean {
  return typeof entry.source === "string" && ownSources.has(entry.source);
}

function describe(priority: unknown): string {
  return typeof priority === "number" || typeof priority === "string" || typeof priority === "boolean" || priority === undefined || priority === null
    ? String(priority)
    : typeof priority;
}

/**
 * The budget OpenClaw gives our own hook, as it registered it: the loader resolves
 * the operator's `plugins.entries.<id>.hooks.timeouts.<hook>` over the plugin's own
 * `timeoutMs` into the entry (`resolveTypedHookTimeoutMs`, 2026.9.6). `undefined`
 * when the registry or our entry cannot be read, or names no budget.
 */
export function ownHookTimeoutMs(registry: unknown, ownSources: ReadonlySet<string>, hookName: string): number | undefined {
  const hooks = hooksOf(registry);
  const entry = hooks?.find((h) => typeof h === "object" && h !== null && isOurs(h, ownSources) && h.hookName === hookName) as
    | { timeoutMs?: unknown }
    | undefined;
  return typeof entry?.timeoutMs === "number" && Number.isFinite(entry.timeoutMs) ? entry.timeoutMs : undefined;
}
