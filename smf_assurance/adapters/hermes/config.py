"""The adapter's configuration, read from the Hermes process's environment.

A configuration problem never stops registration (RUNTIMES.md, "FAIL-OPEN":
a ``register()`` that raises lets every tool run): :meth:`AdapterConfig.from_env`
raises :class:`ConfigError` naming what is missing or wrong, and the entry
point turns it into refusing mode (``smf_assurance.adapters.hermes.refusing``).

``SMF_NATS_URL``        the bus (default ``nats://127.0.0.1:4222``)
``SMF_RUNTIME_KEY``     path of this runtime's private key file (required)
``SMF_RUNTIME_ID``      the runtime id the registry names for that key (required)
``SMF_BUS_CREDENTIAL``  path of this runtime's NATS user nkey seed, ``keys/<principal>.nkey``
                      of the state directory (required; 0600 or stricter). The adapter
                      connects as the principal the key file names, with the inbox
                      prefix ``_INBOX.<principal>`` (``smf_assurance.subjects.bus_access``)
``SMF_CONTEXT_FILE``    the per-matter context file (required; ``mapping.HermesContext``)
``SMF_RELEASE_TRUST_ROOT`` the release trust root file (required; ``release trust-root``)
``SMF_GATE_TIMEOUT``    seconds to wait for a verdict (default 5, at most 30)
``SMF_ATTEST_INTERVAL`` seconds between attestations (default 60)

Confined (``smf-assurance runtime run``, docs/CONFINEMENT.md): no key file and no
seed in the runtime's view. ``SMF_SIGNER_SOCKET`` names the launcher's signer
(``smf_assurance.subjects.signer``), which signs as the runtime and names its
principal; ``SMF_NATS_URL`` is the launcher's forwarder, which answers the
server's nonce with the runtime's nkey, so the adapter connects with the inbox
prefix only. Setting ``SMF_SIGNER_SOCKET`` beside ``SMF_RUNTIME_KEY`` or
``SMF_BUS_CREDENTIAL`` is refused (``smf_key_source_ambiguous``): one source of
identity, never a silent choice between two.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from smf_assurance.adapters.hermes import mapping
from smf_assurance.subjects.bus_access import (
    CREDENTIAL_INVALID,
    BusCredential,
    CredentialFileError,
    read_credential,
)
from smf_assurance.subjects.keys import KeyFileError, load_private_key
from smf_assurance.subjects.release import MalformedReleaseError, TrustRoot, decode_trust_root
from smf_assurance.subjects.signer import SIGNER_SOCKET_ENV, RemoteSigner, Signer, SignerError

ADAPTER_ID: Final = "smf-hermes-adapter"
ADAPTER_VERSION: Final = "0.1.0"
PLUGIN_NAME: Final = "smf-assurance"
PROFILE: Final = "block-only"
REQUIRED_HOOKS: Final = ("pre_tool_call", "transform_llm_output")
"""The hooks a runtime's attestation must show (read by ``runtime add`` without
importing the plugin and its hooks)."""
MAX_TRUST_ROOT_BYTES: Final = 64 * 1024


class ConfigError(Exception):
    def __init__(self, reason_code: str, detail: str = "") -> None:
        super().__init__(f"{reason_code}: {detail}" if detail else reason_code)
        self.reason_code = reason_code
        self.detail = detail


@dataclass(frozen=True, slots=True)
class AdapterConfig:
    nats_url: str
    key: Signer
    runtime_id: str
    context: mapping.HermesContext
    gate_timeout: float = 5.0
    attest_interval: float = 60.0
    trust_root: TrustRoot | None = None
    """The release trust root; ``None`` only when built by hand (then: refusing)."""
    bus_credential: BusCredential | None = None
    """Who the adapter is on the bus; ``None`` only when built by hand (then it connects
    with no credential, which a bus with authorization refuses: every call blocks)."""
    protected: mapping.Protected = mapping.NOTHING_PROTECTED
    """The adapter's own files and Hermes's credential files, out of every tool's reach."""
    bus_principal: str | None = None
    """Confined: the principal whose inbox prefix the adapter connects with (the
    launcher's forwarder authenticates the connection; ``bus_credential`` is None)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AdapterConfig:
        """Read the configuration; raises ConfigError naming what is missing or wrong."""
        key_path = env.get("SMF_RUNTIME_KEY", "")
        signer_path = env.get(SIGNER_SOCKET_ENV, "")
        runtime_id = env.get("SMF_RUNTIME_ID", "")
        context_path = env.get("SMF_CONTEXT_FILE", "")
        if signer_path and (key_path or env.get("SMF_BUS_CREDENTIAL")):
            raise ConfigError(
                "smf_key_source_ambiguous",
                f"set either {SIGNER_SOCKET_ENV} or SMF_RUNTIME_KEY and SMF_BUS_CREDENTIAL",
            )
        if not key_path and not signer_path:
            raise ConfigError("smf_runtime_key_missing", "set SMF_RUNTIME_KEY to the key file")
        if not runtime_id:
            raise ConfigError("smf_runtime_id_missing", "set SMF_RUNTIME_ID")
        if not context_path:
            raise ConfigError("smf_context_missing", "set SMF_CONTEXT_FILE")
        key: Signer
        credential: BusCredential | None = None
        bus_principal: str | None = None
        if signer_path:
            try:
                remote = RemoteSigner.connect(signer_path)
            except SignerError as exc:
                raise ConfigError("smf_signer_unavailable", exc.reason_code) from exc
            key, bus_principal = remote, remote.principal
        else:
            try:
                key, principal = load_private_key(key_path)
            except KeyFileError as exc:
                raise ConfigError("smf_runtime_key_unreadable", str(exc)) from exc
            credential = _bus_credential(principal, env.get("SMF_BUS_CREDENTIAL", ""))
        try:
            context = mapping.load_context(Path(context_path))
        except mapping.MappingError as exc:
            raise ConfigError(
                exc.reason_code, str(exc).removeprefix(exc.reason_code + ": ")
            ) from exc
        return cls(
            nats_url=env.get("SMF_NATS_URL", "nats://127.0.0.1:4222"),
            key=key,
            runtime_id=runtime_id,
            context=context,
            gate_timeout=_seconds(env.get("SMF_GATE_TIMEOUT"), 5.0, 0.2, 30.0),
            attest_interval=_seconds(env.get("SMF_ATTEST_INTERVAL"), 60.0, 1.0, 600.0),
            trust_root=_trust_root(env.get("SMF_RELEASE_TRUST_ROOT", "")),
            bus_credential=credential,
            protected=protected_files(env),
            bus_principal=bus_principal,
        )


def protected_files(env: Mapping[str, str]) -> mapping.Protected:
    """The runtime's key and bus seed (secrets: their names are looked for too), the
    trust root and context file (whoever rewrites them changes what the adapter
    trusts and who it says acts), and Hermes's own ``config.yaml`` and ``.env``
    (``model.api_key`` there is the runtime's model-gateway token)."""
    home = env.get("HERMES_HOME") or str(Path(env.get("HOME") or Path.home()) / ".hermes")
    return mapping.Protected.of(
        (env.get("SMF_RUNTIME_KEY", ""), env.get("SMF_BUS_CREDENTIAL", "")),
        (
            env.get("SMF_RELEASE_TRUST_ROOT", ""),
            env.get("SMF_CONTEXT_FILE", ""),
            str(Path(home) / "config.yaml"),
            str(Path(home) / ".env"),
        ),
    )


def _bus_credential(principal: str, path: str) -> BusCredential:
    """The runtime's bus credential, checked before anything connects with it.

    Fails closed with a reason code: not configured, unreadable, readable by the
    group or others, not a user nkey seed, or nats-py unable to sign with one
    here (the ``nkeys`` package missing from the runtime's environment). Errors
    name the file, never its content.
    """
    if not path:
        raise ConfigError(
            "smf_bus_credential_missing", "set SMF_BUS_CREDENTIAL to the runtime's .nkey file"
        )
    try:
        credential = read_credential(principal, path)
    except CredentialFileError as exc:
        raise ConfigError(exc.reason_code, exc.detail) from exc
    try:
        import nkeys  # noqa: PLC0415 - nats-py imports it only when it signs, so must we
    except ImportError as exc:
        raise ConfigError(
            "smf_bus_credential_unsupported",
            "nats-py cannot sign with an nkey here: install nats-py[nkeys]",
        ) from exc
    try:
        with open(path, "rb") as handle:
            nkeys.from_seed(bytearray(handle.read().strip())).wipe()
    except Exception as exc:
        raise ConfigError(CREDENTIAL_INVALID, f"{path} does not hold a valid nkey seed") from exc
    return credential


def _trust_root(path: str) -> TrustRoot:
    """The operator's release trust root (distributed out of band, docs/RELEASES.md)."""
    if not path:
        raise ConfigError(
            "smf_release_trust_root_missing", "set SMF_RELEASE_TRUST_ROOT to the trust root file"
        )
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_TRUST_ROOT_BYTES + 1)
    except OSError as exc:
        raise ConfigError("smf_release_trust_root_unreadable", exc.strerror or "") from exc
    if len(data) > MAX_TRUST_ROOT_BYTES:
        raise ConfigError("smf_release_trust_root_invalid", "file too large")
    try:
        return decode_trust_root(data)
    except MalformedReleaseError as exc:
        raise ConfigError("smf_release_trust_root_invalid", str(exc)) from exc


def _seconds(raw: str | None, default: float, low: float, high: float) -> float:
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = default
    return min(max(value, low), high)
