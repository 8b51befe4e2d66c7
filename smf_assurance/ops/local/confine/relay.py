"""The first program inside the sandbox: loopback ports relayed to the launcher's sockets.

Run by bubblewrap as ``python3 relay.py --ready-fd FD --forward PORT=SOCKET ... -- COMMAND...``
with the system's Python and the standard library only (it imports nothing of
ours: the sandbox may not hold this package). The sandbox has its own network
namespace with loopback only, so the runtime, configured with
``127.0.0.1:PORT`` for the bus and the model gateway, reaches them only
through these listeners, each relaying bytes to a unix socket of the launcher
(``smf_assurance.ops.local.confine.sidecar``), which holds the credentials.

It listens first, says ``ready`` on ``FD`` (the launcher's only sign that the sandbox
was built: without it the launcher reports bubblewrap's refusal), then runs the
command with the same standard streams, passes ``SIGTERM``, ``SIGINT`` and
``SIGHUP`` on to it, and exits with its status (128 + signal when a signal ended it).
When this program exits, the PID namespace ends and every process left in it is
killed: nothing the runtime started outlives it. A relay connection whose socket
cannot be reached is closed at once (the runtime sees a refused or reset
connection, and fails closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Sequence

CHUNK = 64 * 1024


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
    except (OSError, RuntimeError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


def _handler(socket_path: str):  # type: ignore[no-untyped-def]
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(socket_path)
        except OSError:
            writer.close()
            return
        tasks = [
            asyncio.ensure_future(_pipe(reader, up_writer)),
            asyncio.ensure_future(_pipe(up_reader, writer)),
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            for w in (writer, up_writer):
                w.close()

    return relay


def parse(argv: Sequence[str]) -> tuple[int | None, list[tuple[int, str]], list[str]]:
    ready: int | None = None
    forwards: list[tuple[int, str]] = []
    args = list(argv)
    while len(args) > 1 and args[0] in ("--forward", "--ready-fd"):
        if args[0] == "--ready-fd":
            ready = int(args[1])
        else:
            port, _, path = args[1].partition("=")
            forwards.append((int(port), path))
        args = args[2:]
    if not args or args[0] != "--" or len(args) < 2:
        raise SystemExit(
            "relay: usage: relay.py [--ready-fd FD] [--forward PORT=SOCKET]... -- COMMAND..."
        )
    return ready, forwards, args[1:]


async def main(argv: Sequence[str]) -> int:
    ready, forwards, command = parse(argv)
    servers = [
        await asyncio.start_server(_handler(path), "127.0.0.1", port) for port, path in forwards
    ]
    if ready is not None:
        # the launcher's word that the sandbox is built and listening; closed before the
        # command starts, so the runtime never holds it
        os.write(ready, b"ready\n")
        os.close(ready)
    try:
        child = await asyncio.create_subprocess_exec(*command)
    except OSError as exc:
        sys.stderr.write(f"smf-assurance: cannot start {command[0]} in the sandbox: {exc}\n")
        return 127
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, child.send_signal, signum)
    code = await child.wait()
    for server in servers:
        server.close()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
