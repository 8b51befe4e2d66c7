"""A runtime in its own network namespace reaches the model gateway and nothing behind it.

Runtimes sit on a network that reaches only the bus
and the gateway; only the gateway reaches model providers, only connectors
reach external systems. Here the runtime side is a network namespace this
test makes (``ip netns``, as root): loopback and one veth, whose other end is
on the host with the gateway listening on its address. The fake provider and
a fake external endpoint (the court a connector would file with) listen on
the host's loopback, where the gateway reaches them.

Proves, from inside the namespace: the gateway path works (an attested
runtime's request is answered with the released text, the provider having
been asked by the gateway); the provider and the external endpoint, by the
host's loopback and by the veth's host address, cannot be reached at all;
neither can the gate's bus on the host's loopback. Does not prove: the
docker-compose networks (not changed yet), a runtime's NATS path (the test
attests on the host's side), or anything about a host firewall: this
namespace has no route anywhere but its own /30.

Skipped when not root or when ``ip netns`` is unavailable; it says why.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from smf_assurance.gateway.assembly import start_model_gateway
from smf_assurance.ops.local.model_gateway import (
    gateway_config,
    provision_gateway_runtime,
    set_upstream,
)
from smf_assurance.ops.local.stack import start_stack
from smf_assurance.ops.local.state import StateDir, provision_demo
from smf_assurance.ops.runtimes.provision import provision_runtime
from smf_tools.fake_model import FakeModel, Reply
from tests.support.model_gateway import ACTOR, CLEAN, OTHER, OTHER_ID, PIN, TERMINAL, World, attest

PROBE = textwrap.dedent(
    """
    import json, sys, urllib.request, urllib.error
    plan = json.loads(sys.argv[1])
    out = {}
    for name, (url, body, token) in plan.items():
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = "Bearer " + token
        data = body.encode() if body else None
        try:
            with urllib.request.urlopen(
                urllib.request.Request(url, data=data, headers=headers), timeout=5
            ) as resp:
                out[name] = {"status": resp.status, "body": resp.read().decode()}
        except urllib.error.HTTPError as exc:
            out[name] = {"status": exc.code, "body": exc.read().decode()}
        except OSError as exc:
            reason = getattr(exc, "reason", exc)
            out[name] = {"error": type(reason).__name__, "detail": str(reason)}
    print(json.dumps(out))
    """
)


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


def netns_usable() -> str | None:
    """Why this test cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root for ip netns"
    if shutil.which("ip") is None:
        return "no ip command"
    name = f"smf-probe-{secrets.token_hex(3)}"
    if _ip("netns", "add", name).returncode != 0:
        return "ip netns add failed"
    _ip("netns", "del", name)
    return None


@dataclass(frozen=True)
class Namespace:
    name: str
    host_address: str


@pytest.fixture
def runtime_namespace() -> Iterator[Namespace]:
    why = netns_usable()
    if why is not None:
        pytest.skip(why)
    tag = secrets.token_hex(3)
    name, host_if, ns_if = f"smf-rt-{tag}", f"smfh{tag}", f"smfr{tag}"
    assert _ip("netns", "add", name).returncode == 0
    try:
        assert _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if).returncode == 0
        assert _ip("link", "set", ns_if, "netns", name).returncode == 0
        for _ in range(8):  # a /30 nobody on this host uses yet
            net = f"10.{secrets.randbelow(50) + 200}.{secrets.randbelow(256)}"
            if _ip("addr", "add", f"{net}.1/30", "dev", host_if).returncode == 0:
                break
        else:
            pytest.fail("no free /30 for the veth")
        assert _ip("link", "set", host_if, "up").returncode == 0
        inside = ["-n", name]
        assert _ip(*inside, "addr", "add", f"{net}.2/30", "dev", ns_if).returncode == 0
        assert _ip(*inside, "link", "set", ns_if, "up").returncode == 0
        assert _ip(*inside, "link", "set", "lo", "up").returncode == 0
        yield Namespace(name, f"{net}.1")
    finally:
        _ip("netns", "del", name)  # takes the veth pair with it
        _ip("link", "del", host_if)


async def court() -> tuple[web.AppRunner, int]:
    """The external system a connector would file with, on the host's loopback."""

    async def filed(_request: web.Request) -> web.Response:
        return web.Response(text="filed")

    app = web.Application()
    app.router.add_get("/file", filed)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, int(runner.addresses[0][1])


@pytest.fixture
async def deployment(
    tmp_path: Path, runtime_namespace: Namespace
) -> AsyncIterator[tuple[World, Namespace, int]]:
    state = StateDir(tmp_path / "state")
    provision_demo(state)
    provision_runtime(state, OTHER, OTHER_ID, runtime_pin=PIN, require_release=False)
    model = await FakeModel().start()
    set_upstream(state, model.url, "local-model")
    token = provision_gateway_runtime(
        state,
        OTHER_ID,
        adapter_id="smf-hermes-adapter",
        actor=ACTOR,
        destination=TERMINAL,
        facts=CLEAN,
    )
    stack = await start_stack(state, with_connectors=False)
    gateway = await start_model_gateway(
        gateway_config(state, stack.url, host=runtime_namespace.host_address)
    )
    court_runner, court_port = await court()
    try:
        yield (
            World(state, stack, model, gateway, {OTHER_ID: token}, []),
            runtime_namespace,
            court_port,
        )
    finally:
        await court_runner.cleanup()
        await gateway.close()
        await stack.stop()
        await model.stop()


async def probe_from(namespace: Namespace, plan: dict[str, Any]) -> dict[str, Any]:
    """Run the probe inside the namespace, without blocking the loop the gateway serves on."""
    proc = await asyncio.create_subprocess_exec(
        "ip",
        "netns",
        "exec",
        namespace.name,
        sys.executable,
        "-c",
        PROBE,
        json.dumps(plan),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out)
    return result


async def test_from_the_runtimes_namespace_only_the_gateway_answers(
    deployment: tuple[World, Namespace, int],
) -> None:
    world, namespace, court_port = deployment
    assert (await attest(world, OTHER, OTHER_ID)).accepted
    world.model.default = Reply(content="Filed with the court.")
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "file it"}]})
    provider_port = world.model.port
    nats_port = int(world.stack.url.rsplit(":", 1)[1])
    host = namespace.host_address
    plan = {
        "gateway": [
            f"http://{host}:{world.gateway.port}/v1/chat/completions",
            body,
            world.tokens[OTHER_ID],
        ],
        "provider by loopback": [f"http://127.0.0.1:{provider_port}/v1/models", "", ""],
        "provider by the veth": [f"http://{host}:{provider_port}/v1/models", "", ""],
        "court by loopback": [f"http://127.0.0.1:{court_port}/file", "", ""],
        "court by the veth": [f"http://{host}:{court_port}/file", "", ""],
        "bus by loopback": [f"http://127.0.0.1:{nats_port}/", "", ""],
        "outside world": ["http://192.0.2.10/", "", ""],
    }
    seen = await probe_from(namespace, plan)
    gateway = seen.pop("gateway")
    assert gateway["status"] == 200, gateway
    answer = json.loads(gateway["body"])["choices"][0]["message"]["content"]
    assert answer == "Filed with the court."
    assert len(world.model.requests) == 1  # the gateway, on the host, reached the provider
    for name, result in seen.items():
        assert "error" in result, f"{name} answered from the runtime's namespace: {result}"
        assert result["error"] in {"ConnectionRefusedError", "OSError", "TimeoutError"}, result
