"""Confinement: a runtime run under bubblewrap with no secret in its view (docs/CONFINEMENT.md).

``smf-assurance runtime run --id ID -- COMMAND`` (``smf_assurance.ops.cli.commands.runtime``)
starts the runtime's command in a sandbox built from its confinement profile:

- ``profile``: what the operator declares for a runtime (its home, workspace,
  software folders) and what the launcher reads from the gate's state (its key,
  bus seed and gateway token, which never enter the sandbox);
- ``view``: the sandbox's filesystem as a list of mounts (system folders,
  software and configuration read-only, workspace and session data read-write,
  documents under legal hold read-only), checked before anything starts: no
  state folder, no key, seed or token of any principal in it;
- ``sidecar``: the launcher's forwarders, served on unix sockets bound into the
  sandbox: NATS (answering the server's nonce with the runtime's nkey), the model
  gateway (adding the runtime's bearer token) and the signer (signing with the
  runtime's key the four payload kinds a runtime signs);
- ``relay``: the stdlib-only program that runs first inside the sandbox, listens
  on the loopback ports the runtime is configured with and relays them to the
  sockets, then runs the runtime's command;
- ``launcher``: bubblewrap's command line and the run itself.
"""
