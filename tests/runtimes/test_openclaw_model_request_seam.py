"""Which OpenClaw seams can NOT bind model requests to the process.

The model gateway admits a runtime by its bearer token while the gate holds a
fresh attestation for that runtime id. Our plugin now binds each model request
to its process through a provider plugin's stream wrapper (``smf-gateway``,
``smf_assurance/adapters/openclaw/src/binding.ts``); the plugin's own tests against the real
runtime show the positive seam: every request of an attested ``agent --local``
process and of a Gateway is proven, ``agent exec`` and a process with the plugin
disabled are refused within the lease (tests/runtimes/test_openclaw_gateway.py,
tests/runtimes/test_openclaw_gateway_entry.py). What is left here is the evidence those
tests cannot give: which other seams do not work, and why the wrapper must decide
from process state. It asks the real OpenClaw 2026.9.6 (npm, Node 24, inside
``unshare -n`` when root; the fake model on 127.0.0.1 keeps the request headers a
run names, and nothing else), with a PROBE plugin in plain JavaScript written by
the test (``smf-request-probe``, provider id ``smfgw``):

- a provider plugin (``api.registerProvider`` whose id is the configured
  provider's id, ``models.providers.smfgw``) whose ``wrapStreamFn`` records the
  mode of the registration it came from and whether its process registered the
  probe in full mode, and tags each request (``x-probe-seam``);
- the same probe sets an environment variable in ``register()`` and in every
  hook that fires before a model call (``before_model_resolve``,
  ``agent_turn_prepare``, ``before_prompt_build``, ``before_agent_run``,
  ``llm_input``, ``model_call_started``), read by a second provider
  (``envgw``) whose ``apiKey`` is an env SecretRef and whose header is
  ``${SMF_PROBE_ENV_PROOF}``;
- ``models.providers.<id>.headers`` in the config.

Runs (turn costs measured on the 2-core machine): ``agent --local`` through
``smfgw`` (about 15 s) and through ``envgw`` (15 s); ``agent exec`` through
``smfgw`` (20 s) and with ``envgw`` configured (10 s); one Gateway (``gateway
run``, start about 20 s) with a turn through ``smfgw`` (4-15 s) and one with
``--model envgw/fake-model`` (3 s); ``agent --local`` with the probe disabled
(15 s).

Proves, for the pinned version: the provider hooks that run come from a
``discovery`` registration even in a process that registered the plugin in
``full`` mode (``agent --local``, the Gateway), and ``agent exec`` (which
registers plugins in discovery mode only and calls no tool hook) runs them
too, so a wrapper must decide from process state (a full registration, an
accepted attestation), not from its registration's mode; without the plugin no
probe hook runs, while config headers are static and sent by any process. An
environment secret the plugin sets is read once, before any hook, in ``agent
--local`` and never in the Gateway (whose snapshot resolves before plugins
load: the provider is unavailable) nor in ``agent exec`` (which fails before
loading plugins). No hook before a model call can return a header (their
result types, read) nor change one through the environment (run).
docs/OPENCLAW.md, "Binding model requests to the process", has the evidence.
Does not prove: other model callers than the embedded agent's stream
(``wrapSimpleCompletionStreamFn``, read only), subagents, compaction, other
versions. Removed when the plugin's own tests took over: the
positive runs of ``wrapStreamFn`` (a signed header on every request, in
``agent --local`` and in the Gateway), ``resolveTransportTurnState`` (a header
per request) and ``prepareRuntimeAuth`` (a bearer per run); their findings
stay in docs/OPENCLAW.md with the commit that ran them (72896dd).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.openclaw_conformance import OpenClawRuns, _progress, _start_harness

pytestmark = pytest.mark.slow

PROBE = "smf-request-probe"
PROVIDER = "smfgw"
ENV_PROVIDER = "envgw"
CONFIG_KEY = "probe-config-key"
"""The configured apiKey of ``smfgw``: a test value, not a credential."""
HEADERS = ("authorization", "x-probe-seam", "x-probe-config", "x-probe-env")
"""The only request headers the fake model keeps for these runs."""
BEFORE_MODEL_HOOKS = (
    "before_model_resolve",
    "agent_turn_prepare",
    "before_prompt_build",
    "before_agent_run",
    "llm_input",
    "model_call_started",
)

PROBE_JS = """
import crypto from "node:crypto";
import fs from "node:fs";

// Which OpenClaw seams cannot bind a model request to the process
// (tests/runtimes/test_openclaw_model_request_seam.py). One state per process.
const state = (globalThis.__smfRequestProbe ??= {
  instance: crypto.randomUUID(),
  full: false,
  calls: 0,
});
const log = (record) =>
  fs.appendFileSync(
    process.env.PROBE_LOG,
    JSON.stringify({ argv: process.argv.slice(2, 4), instance: state.instance, ...record }) + "\\n",
  );

export default {
  id: "smf-request-probe",
  name: "SMF request probe",
  description: "Which seams run where, and which cannot carry a per-request value.",
  register(api) {
    const mode = api.registrationMode ?? null;
    if (mode === "full") state.full = true;
    log({ hook: "register", mode });
    process.env.SMF_PROBE_ENV_PROOF = `register:${mode}:${state.instance}`;
    api.registerProvider({
      id: "smfgw",
      label: "SMF request probe provider",
      auth: [],
      wrapStreamFn: (ctx) => {
        log({ hook: "wrapStreamFn", mode, provider: ctx.provider ?? null });
        const inner = ctx.streamFn;
        if (!inner) return undefined;
        return (model, context, options) => {
          state.calls += 1;
          log({ hook: "wrapped-call", mode, n: state.calls, fullInProcess: state.full });
          const seam = `${state.instance}:${state.calls}`;
          return inner(model, context, {
            ...options,
            headers: { ...(options?.headers ?? {}), "x-probe-seam": seam },
          });
        };
      },
    });
    for (const hook of BEFORE_MODEL_HOOKS) {
      api.on(hook, () => {
        log({ hook, mode });
        process.env.SMF_PROBE_ENV_PROOF = `${hook}:${state.instance}`;
        return undefined;
      });
    }
  },
};
""".replace("BEFORE_MODEL_HOOKS", json.dumps(list(BEFORE_MODEL_HOOKS)))

MODEL = {
    "id": "fake-model",
    "name": "Fake",
    "reasoning": False,
    "input": ["text"],
    "contextWindow": 131072,
    "maxTokens": 8192,
}


def probe_files(*, declare_provider: bool = True) -> dict[str, Any]:
    manifest: dict[str, Any] = {
        "id": PROBE,
        "name": "SMF request probe",
        "activation": {"onStartup": True},
        "configSchema": {"type": "object", "additionalProperties": False},
    }
    if declare_provider:
        manifest["providers"] = [PROVIDER]
    return {
        f"{PROBE}/package.json": {
            "name": PROBE,
            "version": "0.0.1",
            "type": "module",
            "openclaw": {"extensions": ["./index.js"]},
        },
        f"{PROBE}/openclaw.plugin.json": manifest,
        f"{PROBE}/index.js": PROBE_JS,
        "workspace/note.txt": "a note",
    }


def probe_config(primary: str, *, enabled: bool = True, env_provider: bool = True) -> Any:
    """The probe enabled (hooks may see the conversation, so the typed hooks fire),
    ``smfgw`` and optionally ``envgw`` pointing at the fake model."""
    providers: dict[str, Any] = {
        PROVIDER: {
            "baseUrl": "{{model_url}}",
            "apiKey": CONFIG_KEY,
            "api": "openai-completions",
            "models": [MODEL],
            "headers": {"x-probe-config": "static"},
        }
    }
    if env_provider:
        env_ref = {"source": "env", "provider": "default", "id": "SMF_PROBE_ENV_PROOF"}
        providers[ENV_PROVIDER] = {
            "baseUrl": "{{model_url}}",
            "apiKey": env_ref,
            "api": "openai-completions",
            "models": [MODEL],
            "headers": {"x-probe-env": "${SMF_PROBE_ENV_PROOF}"},
        }
    return {
        "plugins": {
            "load": {"paths": [f"{{{{root}}}}/{PROBE}"]},
            "entries": {PROBE: {"enabled": enabled, "hooks": {"allowConversationAccess": True}}},
        },
        "agents": {"defaults": {"model": {"primary": f"{primary}/fake-model"}}},
        "models": {"providers": providers},
    }


def script(name: str) -> dict[str, Any]:
    """Two model calls: a ``read`` of the note, then the final text."""
    return {
        name: {
            "calls": [{"name": "read", "arguments": {"path": "{{root}}/workspace/note.txt"}}],
            "final": "done",
        }
    }


@pytest.fixture(scope="module")
def probed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OpenClawRuns]:
    """The harness with the fake model only (no gate: nothing here is gated)."""
    yield from _start_harness(request, tmp_path_factory, "openclaw-request-seam", None)


def probe_run(
    probed: OpenClawRuns, name: str, mode: str, config: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    return probed.run(
        name,
        script(name),
        mode=mode,
        files=extra.pop("files", probe_files()),
        config=config,
        env={"PROBE_LOG": "{{root}}/probe.jsonl"},
        logs=["probe.jsonl"],
        record_headers=list(HEADERS),
        **extra,
    )


@pytest.fixture(scope="module")
def runs(probed: OpenClawRuns, request: pytest.FixtureRequest) -> dict[str, dict[str, Any]]:
    """Every run of the module, once; each test reads its part."""
    say = _progress(request)
    done: dict[str, dict[str, Any]] = {}
    done["local"] = probe_run(probed, "seam-local", "local", probe_config(PROVIDER))
    done["local-env"] = probe_run(probed, "seam-local-env", "local", probe_config(ENV_PROVIDER))
    done["exec"] = probe_run(
        probed, "seam-exec", "agent-exec", probe_config(PROVIDER, env_provider=False)
    )
    done["exec-env"] = probe_run(probed, "seam-exec-env", "agent-exec", probe_config(PROVIDER))
    done["off"] = probe_run(
        probed, "seam-off", "local", probe_config(PROVIDER, enabled=False, env_provider=False)
    )
    started = probed.send(
        {
            "op": "gateway-start",
            "name": "seam",
            "files": probe_files(),
            "config": probe_config(PROVIDER),
            "env": {"PROBE_LOG": "{{root}}/probe.jsonl"},
        }
    )
    for key, model in (("gateway", None), ("gateway-env", f"{ENV_PROVIDER}/fake-model")):
        name = f"seam-{key}"
        done[key] = probed.send(
            {
                "op": "gateway-turn",
                "gateway": "seam",
                "name": name,
                "prompt": f"SCENARIO:{name} do what the script says.",
                "scripts": script(name),
                "model": model,
                "logs": ["probe.jsonl"],
                "record_headers": list(HEADERS),
            }
        )
    probed.send({"op": "gateway-stop", "gateway": "seam"})
    say(
        "request seam runs: "
        + ", ".join(f"{key} {run['seconds']}s" for key, run in done.items())
        + f"; Gateway start {started['seconds']}s"
    )
    return done


def records(run: dict[str, Any], hook: str) -> list[dict[str, Any]]:
    return [r for r in run["logs"]["probe.jsonl"] if r["hook"] == hook]


def header(run: dict[str, Any], name: str) -> list[str | None]:
    """The value of one header on each request the fake model answered, in order."""
    return [r["headers"].get(name) for r in run["requests"] if r["scenario"] == run["name"]]


@pytest.mark.parametrize("key", ["local", "gateway"])
def test_the_hooks_come_from_a_discovery_registration_even_in_a_full_process(
    runs: dict[str, dict[str, Any]], key: str
) -> None:
    """The process registered the probe in ``full`` mode, yet the provider hooks that
    ran were those of a ``discovery`` registration: a wrapper cannot trust the mode it
    was registered in, only process state."""
    run = runs[key]
    assert run["returncode"] == 0, run["stderr"]
    assert [r["answered"] for r in run["requests"]] == ["tool:read", "text"]
    calls = records(run, "wrapped-call")[-2:]
    argv = ["gateway", "run"] if key == "gateway" else ["agent", "--local"]
    assert [c["argv"] for c in calls] == [argv, argv]  # in the process that asks the model
    assert {c["mode"] for c in calls} == {"discovery"}
    assert all(c["fullInProcess"] for c in calls)
    instance = calls[0]["instance"]
    # these wrapped calls are the requests the model got, one tag per request
    assert header(run, "x-probe-seam") == [f"{instance}:{c['n']}" for c in calls]
    modes = {r["mode"] for r in records(run, "register") if r["instance"] == instance}
    assert "full" in modes


def test_agent_exec_runs_the_provider_seam_but_never_registers_in_full_mode(
    runs: dict[str, dict[str, Any]],
) -> None:
    """``openclaw agent exec`` loads plugins in discovery mode only and never calls tool
    hooks (docs/OPENCLAW.md finding 1), but it DOES call a provider plugin's
    ``wrapStreamFn`` (its other provider hooks too: ``resolveTransportTurnState``,
    ``prepareRuntimeAuth``, in the research run). A wrapper that signed whenever it
    ran would prove ``agent exec``; ours signs only in a process with a full
    registration (tests/runtimes/test_openclaw_gateway.py shows ``agent exec`` refused)."""
    run = runs["exec"]
    assert run["returncode"] == 0, run["stderr"]
    assert [r["answered"] for r in run["requests"]] == ["tool:read", "text"]
    assert {r["mode"] for r in records(run, "register")} == {"discovery"}
    assert [c["fullInProcess"] for c in records(run, "wrapped-call")] == [False, False]
    assert all(value is not None for value in header(run, "x-probe-seam"))
    # None of the tool-call or conversation hooks ran in that process.
    assert not any(records(run, hook) for hook in BEFORE_MODEL_HOOKS)


def test_without_the_plugin_only_the_static_config_header_is_sent(
    runs: dict[str, dict[str, Any]],
) -> None:
    """The same config with the probe's entry disabled: no probe header, the configured
    key as the bearer; ``models.providers.<id>.headers`` arrive all the same, so a
    header in the config binds nothing to a process."""
    run = runs["off"]
    assert run["returncode"] == 0, run["stderr"]
    assert run["logs"]["probe.jsonl"] == []
    assert header(run, "x-probe-seam") == [None, None]
    assert header(run, "authorization") == [f"Bearer {CONFIG_KEY}"] * 2
    assert header(run, "x-probe-config") == ["static", "static"]


def test_an_environment_secret_the_plugin_sets_is_read_once_before_any_hook(
    runs: dict[str, dict[str, Any]],
) -> None:
    """``agent --local`` through ``envgw``: the env SecretRef (bearer) and the
    ``${SMF_PROBE_ENV_PROOF}`` header carry what ``register()`` set; every hook that
    ran before the model calls set it again, and neither request carries their value:
    the config's secrets are resolved once per process, not per request. None of
    these hooks can return a header either (docs/OPENCLAW.md, read)."""
    run = runs["local-env"]
    assert run["returncode"] == 0, run["stderr"]
    fired = {hook for hook in BEFORE_MODEL_HOOKS if records(run, hook)}
    assert fired == set(BEFORE_MODEL_HOOKS)
    [value] = set(header(run, "x-probe-env"))
    assert str(value).startswith("register:")
    assert header(run, "authorization") == [f"Bearer {value}"] * 2


def test_an_environment_secret_set_by_the_plugin_never_reaches_the_gateway_nor_agent_exec(
    runs: dict[str, dict[str, Any]],
) -> None:
    """The Gateway resolves its secret snapshot before it loads plugins: the
    ``envgw`` provider is unavailable, the turn fails, the model is never asked.
    ``agent exec`` fails resolving the config's secrets before it loads any plugin."""
    gateway = runs["gateway-env"]
    assert gateway["returncode"] != 0
    assert "SECRET_SURFACE_UNAVAILABLE" in gateway["stderr"] + gateway["stdout"]
    assert gateway["requests"] == []
    exec_run = runs["exec-env"]
    assert exec_run["returncode"] != 0
    assert "failed to resolve secrets" in exec_run["stderr"] + exec_run["stdout"]
    assert exec_run["requests"] == []
    assert exec_run["logs"]["probe.jsonl"] == []
