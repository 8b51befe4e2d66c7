"""``runtime confine`` and ``runtime run``: a runtime in its sandbox (docs/CONFINEMENT.md).

- ``runtime confine --id ID --kind K --home DIR --workspace DIR [--runtime-dir DIR]...``
  writes the runtime's confinement profile (``STATE/runtimes/ID.confine.json``): the
  operator's word on which folders the sandbox shows and how.
- ``runtime run --id ID -- COMMAND ...`` starts the command confined
  (``smf_assurance.ops.local.confine.launcher``): refused in one line, before anything starts,
  when the profile names a missing folder, bubblewrap is absent, a secret of any
  principal is in view, or a secret of the runtime cannot be read; never run
  unconfined. ``--plan`` shows the sandbox instead of starting it.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

import msgspec

from smf_assurance.ops.cli.cli_json import ConfineMountJson, RuntimeConfineJson, RuntimeRunPlanJson
from smf_assurance.ops.cli.commands.onboard import runtime_bus, state_of
from smf_assurance.ops.cli.output import emit, fail, say, table
from smf_assurance.ops.local.confine.launcher import LaunchError, launch, prepare
from smf_assurance.ops.local.confine.profile import (
    PROFILE_SCHEMA,
    ConfinementProfile,
    ProfileError,
    check_profile,
    encode_profile,
    profile_path,
)
from smf_assurance.ops.local.defaults import default_state_dir
from smf_assurance.ops.local.logs import configure_logging
from smf_assurance.ops.local.onboarding import Changes
from smf_assurance.subjects.names import SubjectError, token

STATE_HELP = f"the gate's state (default: {default_state_dir()})"


def _absolute(path: Path) -> str:
    return os.path.abspath(path)


def run_confine(args: argparse.Namespace) -> int:
    state = state_of(args)
    try:
        runtime_id = token(args.runtime_id)
    except SubjectError:
        fail(f"--id: {args.runtime_id!r} is not a runtime id")
    env: dict[str, str] = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep:
            fail(f"--env {item!r}: give NAME=VALUE")
        env[name] = value
    nats_url = args.nats or runtime_bus(argparse.Namespace(nats=None), state)
    try:
        profile = ConfinementProfile(
            schema=PROFILE_SCHEMA,
            runtime_id=runtime_id,
            kind=args.kind,
            home=_absolute(args.home),
            workspace=_absolute(args.workspace),
            nats_url=nats_url,
            gateway_url=args.gateway_url,
            principal=args.principal,
            runtime_dirs=tuple(_absolute(p) for p in args.runtime_dir),
            read_only=tuple(_absolute(p) for p in args.read_only),
            env=env,
            holds_file=None if args.holds is None else _absolute(args.holds),
            cwd=None if args.cwd is None else _absolute(args.cwd),
        )
        msgspec.convert(msgspec.to_builtins(profile), type=ConfinementProfile)
        check_profile(profile)
    except (ProfileError, msgspec.ValidationError) as exc:
        fail(str(exc))
    path = profile_path(state, runtime_id)
    changes = Changes()
    changes.replace(path, encode_profile(profile))
    changes.apply()
    value = RuntimeConfineJson(
        runtime_id=runtime_id,
        kind=profile.kind,
        profile=str(path),
        home=profile.home,
        workspace=profile.workspace,
        runtime_dirs=profile.runtime_dirs,
        read_only=profile.read_only,
        nats_url=profile.nats_url,
        gateway_url=profile.gateway_url,
    )
    if args.json:
        emit(value)
        return 0
    table(
        ("setting", "value"),
        [
            ("runtime", f"{runtime_id} ({profile.kind})"),
            ("profile", path),
            ("home", f"{profile.home} (configuration read-only, session data read-write)"),
            ("workspace", f"{profile.workspace} (read-write)"),
            ("software", ", ".join(profile.runtime_dirs) or "-"),
            ("read-only data", ", ".join(profile.read_only) or "-"),
            ("bus", f"{profile.nats_url} (through the launcher)"),
            ("model gateway", f"{profile.gateway_url} (through the launcher)"),
        ],
    )
    say(f"start it confined: smf-assurance runtime run --id {runtime_id} -- COMMAND ...")
    return 0


def run_run(args: argparse.Namespace) -> int:
    # the runtime's stdout is its own: the forwarders' warnings go to stderr
    configure_logging(json=False, level="warning")
    state = state_of(args)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    try:
        if args.plan:
            plan, _ = prepare(
                state, args.runtime_id, command or ["true"], bwrap=args.bwrap, plan_only=True
            )
            shutil.rmtree(plan.run_dir, ignore_errors=True)
            document = plan.document()
            value = RuntimeRunPlanJson(
                runtime_id=plan.profile.runtime_id,
                profile_digest=plan.digest,
                mounts=tuple(msgspec.convert(m, ConfineMountJson) for m in plan.view.describe()),
                holds=plan.view.holds,
                gate_holds=plan.gate_holds,
                gate_holds_unasked=plan.gate_unasked,
                namespaces=tuple(document["namespaces"]),  # type: ignore[arg-type]
                forwarders=dict(plan.forwards),
                env=tuple(sorted(plan.env)),
                command=tuple(command),
            )
            if args.json:
                emit(value)
            else:
                table(
                    ("mount", "source", "in the sandbox"),
                    [(m.kind, m.source or "-", m.dest) for m in value.mounts],
                )
                say(f"holds read-only: {', '.join(value.holds) or '-'}")
                if value.gate_holds_unasked is not None:
                    say(
                        "the gate's holds are not in this plan (a start would be refused): "
                        + value.gate_holds_unasked
                    )
                ports = (f"{k} 127.0.0.1:{v}" for k, v in value.forwarders.items())
                say(f"forwarders: {', '.join(ports)}")
                say(f"profile digest: {value.profile_digest}")
            return 0
        outcome = launch(state, args.runtime_id, command, bwrap=args.bwrap)
    except LaunchError as exc:
        fail(str(exc))
    if outcome.reason == "holds_changed":
        fail(
            f"the legal holds of runtime {args.runtime_id} changed; it was stopped: start it "
            "again to apply them",
            code=outcome.exit_code,
        )
    if outcome.reason is not None and outcome.reason.startswith("holds_unreachable:"):
        fail(
            f"the gate stopped telling the legal holds of runtime {args.runtime_id}; it was "
            "stopped (fail closed): " + outcome.reason.removeprefix("holds_unreachable:"),
            code=outcome.exit_code,
        )
    if outcome.reason is not None and outcome.reason.startswith("bwrap_refused:"):
        fail(
            "bubblewrap refused to build the sandbox, nothing ran: "
            + outcome.reason.removeprefix("bwrap_refused:")
        )
    return outcome.exit_code
