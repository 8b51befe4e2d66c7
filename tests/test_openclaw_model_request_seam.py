"""Can an OpenClaw plugin bind the model requests to its own process? (issue 16, research)

The model gateway admits a runtime by its bearer token while the gate holds a
fresh attestation for that runtime id, so within the lease another OpenClaw
process of the same runtime id without our plugin (or ``openclaw agent
exec``, which never calls tool hooks) is served. For Hermes the plugin
attaches a per-process proof to every model request. This module asks the
real OpenClaw 2026.9.6 (npm, Node 24, inside ``unshare -n`` when root; the
fake model on 127.0.0.1 keeps the request headers a run names, and nothing
else) which seams can do the same, with a PROBE plugin in plain JavaScript
written by the test (``smf-request-probe``, provider id ``smfgw``):

- a provider plugin (``api.registerProvider`` whose id is the configured
  provider's id, ``models.providers.smfgw``): ``wrapStreamFn`` adds a header
  on every model call, including a real Ed25519 signature over the process's
  random instance id, a counter and an issue time (the shape of Hermes's
  ``Smf-Instance-Proof``); ``resolveTransportTurnState`` adds one per call;
  ``prepareRuntimeAuth`` rewrites the bearer key (once per run);
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

Proves, for the pinned version: a provider plugin's ``wrapStreamFn`` runs on
every model request to its provider and its headers arrive, in ``agent
--local`` and in the Gateway process; the hooks it uses come from a
``discovery`` registration even in those processes, and ``agent exec`` (which
registers plugins in discovery mode only) runs them too, so a wrapper must
decide from process state (a full registration, an accepted attestation), not
from its registration's mode: the probe's signed header is absent from
``agent exec``'s requests and present elsewhere; without the plugin no probe
header is sent, while config headers are static and sent by any process.
An environment secret the plugin sets is read once, before any hook, in
``agent --local`` and never in the Gateway (whose snapshot resolves before
plugins load: the provider is unavailable) nor in ``agent exec`` (which fails
before loading plugins). No hook before a model call can return a header
(their result types, read) nor change one through the environment (run).
docs/OPENCLAW.md, "Binding model requests to the process", has the
evidence and the recommendation. Does not prove: other model callers than the
embedded agent's stream (``wrapSimpleCompletionStreamFn``, read only),
subagents, compaction, other versions.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from tests.test_openclaw_conformance import OpenClawRuns, _progress, _start_harness

pytestmark = pytest.mark.slow

PROBE = "smf-request-probe"
PROVIDER = "smfgw"
ENV_PROVIDER = "envgw"
CONFIG_KEY = "probe-config-key"
"""The configured apiKey of ``smfgw``: a test value, not a credential."""
HEADERS = (
    "authorization",
    "x-probe-seam",
    "x-probe-instance-proof",
    "x-probe-turn",
    "x-probe-config",
    "x-probe-env",
)
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

// Which OpenClaw seams can put a per-process value on a model request
// (tests/test_openclaw_model_request_seam.py). One state per process.
const state = (globalThis.__smfRequestProbe ??= {
  instance: crypto.randomUUID(),
  keys: crypto.generateKeyPairSync("ed25519"),
  full: false,
  calls: 0,
  auths: 0,
});
const log = (record) =>
  fs.appendFileSync(
    process.env.PROBE_LOG,
    JSON.stringify({ argv: process.argv.slice(2, 4), instance: state.instance, ...record }) + "\\n",
  );
const b64u = (bytes) => Buffer.from(bytes).toString("base64url");

export default {
  id: "smf-request-probe",
  name: "SMF request probe",
  description: "Which seams can add a header to a model request.",
  register(api) {
    const mode = api.registrationMode ?? null;
    if (mode === "full") state.full = true;
    log({
      hook: "register",
      mode,
      publicKey: state.keys.publicKey.export({ format: "jwk" }).x,
    });
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
          const headers = { "x-probe-seam": `${state.instance}:${state.calls}` };
          // What our plugin would do: sign only in a process that registered it in
          // full mode (decided now, from process state, not from this registration).
          if (state.full) {
            const claim = { instance: state.instance, n: state.calls, issued_at_ms: Date.now() };
            const payload = Buffer.from(JSON.stringify(claim));
            const signature = crypto.sign(null, payload, state.keys.privateKey);
            headers["x-probe-instance-proof"] = `${b64u(payload)}.${b64u(signature)}`;
          }
          log({ hook: "wrapped-call", mode, n: state.calls, fullInProcess: state.full });
          return inner(model, context, {
            ...options,
            headers: { ...(options?.headers ?? {}), ...headers },
          });
        };
      },
      resolveTransportTurnState: (ctx) => {
        log({ hook: "resolveTransportTurnState", mode, turnId: ctx?.turnId ?? null });
        return { headers: { "x-probe-turn": `${state.instance}:${ctx?.turnId ?? ""}` } };
      },
      prepareRuntimeAuth: async (ctx) => {
        state.auths += 1;
        log({ hook: "prepareRuntimeAuth", mode, n: state.auths });
        return { apiKey: `${ctx.apiKey}.${state.instance}.${state.auths}` };
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


def verify_proof(value: str, public_key: str) -> dict[str, Any]:
    """Open the probe's ``<payload>.<signature>`` (base64url) with its Ed25519 key."""
    payload, signature = (base64.urlsafe_b64decode(part + "==") for part in value.split("."))
    key = VerifyKey(base64.urlsafe_b64decode(public_key + "=="))
    claim: dict[str, Any] = json.loads(key.verify(payload, signature))
    return claim


@pytest.mark.parametrize("key", ["local", "gateway"])
def test_a_provider_plugin_puts_a_signed_header_on_every_model_request(
    runs: dict[str, dict[str, Any]], key: str
) -> None:
    """``wrapStreamFn`` of the provider the config names runs once per model call, in
    the process that makes it (``agent --local``, or ``gateway run`` for a Gateway
    turn), and its headers reach the provider: one value per request, this process's
    instance, a counter, a signature the process's key verifies."""
    run = runs[key]
    assert run["returncode"] == 0, run["stderr"]
    assert [r["answered"] for r in run["requests"]] == ["tool:read", "text"]
    calls = records(run, "wrapped-call")[-2:]
    argv = ["gateway", "run"] if key == "gateway" else ["agent", "--local"]
    assert [c["argv"] for c in calls] == [argv, argv]
    [instance] = {c["instance"] for c in calls}
    seams = header(run, "x-probe-seam")
    assert seams == [f"{instance}:{c['n']}" for c in calls]
    assert len(set(seams)) == 2  # one value per request
    [public_key] = {r["publicKey"] for r in records(run, "register") if r["instance"] == instance}
    claims = [
        verify_proof(str(value), public_key) for value in header(run, "x-probe-instance-proof")
    ]
    assert [(c["instance"], c["n"]) for c in claims] == [(instance, c["n"]) for c in calls]
    # A forged or replayed-and-edited value does not verify.
    forged = str(header(run, "x-probe-instance-proof")[0]).replace(".", ".A", 1)
    with pytest.raises((BadSignatureError, ValueError)):
        verify_proof(forged, public_key)


@pytest.mark.parametrize("key", ["local", "gateway"])
def test_the_turn_state_and_runtime_auth_hooks_reach_the_request_too(
    runs: dict[str, dict[str, Any]], key: str
) -> None:
    """``resolveTransportTurnState`` adds its headers to each request (a fresh turn id
    per call); ``prepareRuntimeAuth`` gets the configured key and what it returns is
    the bearer, once per run (both calls carry the same value); the config's static
    header rides along."""
    run = runs[key]
    turns = header(run, "x-probe-turn")
    assert all(value is not None for value in turns)
    assert len(set(turns)) == 2
    bearers = header(run, "authorization")
    [instance] = {str(value).split(".")[1] for value in bearers}
    assert bearers == [f"Bearer {CONFIG_KEY}.{instance}.1"] * 2
    assert header(run, "x-probe-config") == ["static", "static"]


@pytest.mark.parametrize("key", ["local", "gateway"])
def test_the_hooks_come_from_a_discovery_registration_even_in_a_full_process(
    runs: dict[str, dict[str, Any]], key: str
) -> None:
    """The process registered the probe in ``full`` mode, yet the provider hooks that
    ran were those of a ``discovery`` registration: a wrapper cannot trust the mode it
    was registered in, only process state."""
    run = runs[key]
    calls = records(run, "wrapped-call")[-2:]
    assert {c["mode"] for c in calls} == {"discovery"}
    assert all(c["fullInProcess"] for c in calls)
    instance = calls[0]["instance"]
    modes = {r["mode"] for r in records(run, "register") if r["instance"] == instance}
    assert "full" in modes


def test_agent_exec_runs_the_provider_seam_but_never_registers_in_full_mode(
    runs: dict[str, dict[str, Any]],
) -> None:
    """``openclaw agent exec`` loads plugins in discovery mode only and never calls tool
    hooks (docs/OPENCLAW.md finding 1), but it DOES call a provider plugin's
    ``wrapStreamFn``, ``resolveTransportTurnState`` and ``prepareRuntimeAuth``. A
    wrapper that signs only in a process with a full registration sends no proof
    there."""
    run = runs["exec"]
    assert run["returncode"] == 0, run["stderr"]
    assert [r["answered"] for r in run["requests"]] == ["tool:read", "text"]
    assert {r["mode"] for r in records(run, "register")} == {"discovery"}
    assert [c["fullInProcess"] for c in records(run, "wrapped-call")] == [False, False]
    assert all(value is not None for value in header(run, "x-probe-seam"))
    assert header(run, "x-probe-instance-proof") == [None, None]
    assert all(value is not None for value in header(run, "x-probe-turn"))
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
    for name in ("x-probe-seam", "x-probe-instance-proof", "x-probe-turn"):
        assert header(run, name) == [None, None], name
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
