"""A local certificate authority and its certificates, for TLS between machines.

TLS wherever a network is crossed: the embedded server listens on 127.0.0.1 only,
where plain TCP stays; a cluster's nodes and the clients on other machines reach
each other over a network, so there every connection is TLS
(``deploy/nats/cluster.conf`` and docs/OPERATIONS.md, "TLS"). A firm with its own
PKI gives its certificates instead; this is for a firm without one, and for the tests.

What :func:`init_tls` writes, each file refused if it already exists (nothing is
overwritten, so a CA in use is never replaced by accident):

- ``ca.pem`` (0644): the CA's certificate, the one file clients are given
  (``SMF_NATS_CA``); a client trusts it and nothing else for the bus.
- ``ca-key.pem`` (0600): the CA's private key. Only issuing needs it: keep it off
  the servers.
- ``bus.pem`` (0644) and ``bus-key.pem`` (0600): the nodes' certificate and key, with every
  name the nodes are reached by (``--host``; ``localhost`` and ``127.0.0.1`` always),
  usable as a server (clients) and as a client (routes between nodes verify each
  other's certificate against the same CA).
- ``client.conf`` and ``route.conf``: the node config's TLS includes, naming those
  files by their absolute paths (:func:`nats_includes`).

Keys are ECDSA P-256. The CA is valid ten years and can sign only end certificates
(path length 0); the bus certificate two years.

:func:`issue_cert` gives one more server (the console, the model gateway) a
certificate of its own from that CA, and :func:`serving_tls` is how those servers
choose: HTTPS with a certificate, plain HTTP on a loopback address only.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from smf_assurance.subjects.clock import wall_clock_ms
from smf_assurance.subjects.hosts import is_loopback

NATS_CLIENT_INCLUDE: Final = "client.conf"
NATS_ROUTE_INCLUDE: Final = "route.conf"
"""The two includes of ``deploy/nats/cluster.conf`` (``tls/client.conf`` at the top,
``tls/route.conf`` in its ``cluster`` block): empty for a cluster on loopback, or
the ``tls {}`` blocks :func:`nats_includes` writes."""
TLS_TIMEOUT_S: Final = 2
CA_CERT: Final = "ca.pem"
CA_KEY: Final = "ca-key.pem"
BUS_CERT: Final = "bus.pem"
BUS_KEY: Final = "bus-key.pem"
ALWAYS_HOSTS: Final = ("localhost", "127.0.0.1")
CA_DAYS: Final = 3650
BUS_DAYS: Final = 730
MAX_HOSTS: Final = 64
_DNS_NAME: Final = re.compile(
    r"\A(?=.{1,253}\Z)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*\Z"
)


def _utc_now() -> datetime.datetime:
    return datetime.datetime.fromtimestamp(wall_clock_ms() / 1000, datetime.UTC)


class TlsInitError(Exception):
    """The certificates cannot be made as asked; the message says why in one line."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where :func:`init_tls` wrote the CA and the bus's certificate."""

    directory: Path
    hosts: tuple[str, ...]
    not_after: datetime.datetime

    @property
    def ca_cert(self) -> Path:
        return self.directory / CA_CERT

    @property
    def ca_key(self) -> Path:
        return self.directory / CA_KEY

    @property
    def cert(self) -> Path:
        return self.directory / BUS_CERT

    @property
    def key(self) -> Path:
        return self.directory / BUS_KEY


def check_hosts(hosts: Sequence[str]) -> tuple[str, ...]:
    """The names the bus certificate holds: ``hosts`` (DNS names or IP addresses) and
    :data:`ALWAYS_HOSTS`, in order, each once. A name that is neither is refused:
    a certificate for a misspelt host is one no client can use."""
    found: list[str] = []
    for host in (*ALWAYS_HOSTS, *hosts):
        name = host.strip().lower()
        try:
            name = str(ipaddress.ip_address(name))
        except ValueError:
            if not _DNS_NAME.fullmatch(name):
                raise TlsInitError(f"{host!r} is not a host name or an IP address") from None
        if name not in found:
            found.append(name)
    if len(found) > MAX_HOSTS:
        raise TlsInitError(f"at most {MAX_HOSTS} host names in one certificate")
    return tuple(found)


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` with ``mode`` (refused if it exists: ``O_EXCL``), write ``data``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _key_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    names: tuple[str, ...],
    start: datetime.datetime,
    not_after: datetime.datetime,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new key and its end certificate for ``names``, signed by the CA: for servers,
    and for clients (a node's routes present it to the other nodes)."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName([_san(n) for n in names]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def init_tls(
    directory: Path, hosts: Sequence[str], *, now: datetime.datetime | None = None
) -> TlsFiles:
    """Make a CA and the bus's certificate signed by it, in ``directory``.

    The directory is made 0700 when absent; an existing one must hold none of the
    four files (each is created exclusively, keys 0600), so an existing CA is never
    replaced. ``now`` is for tests; the certificates start a minute before it, so a
    clock slightly behind on another machine still accepts them.
    """
    names = check_hosts(hosts)
    start = (now or _utc_now()) - datetime.timedelta(minutes=1)
    files = TlsFiles(directory, names, start + datetime.timedelta(days=BUS_DAYS))
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise TlsInitError(f"cannot make {directory}: {exc.strerror}") from exc
    taken = [p.name for p in (files.ca_cert, files.ca_key, files.cert, files.key) if p.exists()]
    if taken:
        raise TlsInitError(
            f"{directory} already holds {', '.join(taken)}; nothing was written "
            "(move them away to make a new CA)"
        )
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "SMF Assurance local bus CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    bus_key, bus_cert = _leaf(ca_key, ca_name, names, start, files.not_after)
    try:
        _write_new(files.ca_key, _key_bytes(ca_key), 0o600)
        _write_new(files.key, _key_bytes(bus_key), 0o600)
        _write_new(files.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
        _write_new(files.cert, bus_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    except OSError as exc:
        raise TlsInitError(f"cannot write in {directory}: {exc.strerror}") from exc
    write_nats_includes(directory, files)
    return files


def _conf_path(path: Path) -> str:
    """A path as a quoted nats config string (JSON's quoting is the config's)."""
    return json.dumps(str(path.resolve()))


def nats_includes(files: TlsFiles) -> dict[str, str]:
    """The node config's two TLS includes for ``files``.

    Clients: TLS required, handshake first (``handshake_first``: the server speaks
    TLS before its greeting, so a plain client gets nothing, not even the nonce it
    would sign). Routes: TLS both ways, each node verifying the other's certificate
    against the CA (``verify``), so only a holder of a certificate this CA signed
    joins the cluster.
    """
    cert, key, ca = _conf_path(files.cert), _conf_path(files.key), _conf_path(files.ca_cert)
    client = (
        "# Client connections: TLS only, handshake first (smf-assurance tls init).\n"
        f"tls {{\n  cert_file: {cert}\n  key_file: {key}\n"
        f"  handshake_first: true\n  timeout: {TLS_TIMEOUT_S}\n}}\n"
    )
    route = (
        "# Routes between nodes: TLS, each side verifying the other (smf-assurance tls init).\n"
        f"tls {{\n  cert_file: {cert}\n  key_file: {key}\n  ca_file: {ca}\n"
        f"  verify: true\n  timeout: {TLS_TIMEOUT_S}\n}}\n"
    )
    return {NATS_CLIENT_INCLUDE: client, NATS_ROUTE_INCLUDE: route}


def write_nats_includes(directory: Path, files: TlsFiles | None) -> None:
    """Write the two includes into ``directory``: TLS for ``files``, or empty (a
    cluster on loopback). Replaced whole, by rename, so a node never reads half."""
    texts = (
        nats_includes(files)
        if files is not None
        else {NATS_CLIENT_INCLUDE: "", NATS_ROUTE_INCLUDE: ""}
    )
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name, text in texts.items():
        staged = directory / f".{name}.tmp"
        staged.write_text(text)
        staged.replace(directory / name)


_NAME: Final = re.compile(r"\A[a-z0-9][a-z0-9-]{0,62}\Z")


@dataclass(frozen=True, slots=True)
class IssuedCert:
    """A server's certificate and key that :func:`issue_cert` wrote."""

    cert: Path
    key: Path
    hosts: tuple[str, ...]
    not_after: datetime.datetime


def issue_cert(
    ca_dir: Path,
    name: str,
    hosts: Sequence[str],
    out: Path,
    *,
    now: datetime.datetime | None = None,
) -> IssuedCert:
    """A certificate for one more server (the console, the model gateway), signed by the
    CA :func:`init_tls` made in ``ca_dir``, written as ``out/<name>.pem`` and
    ``out/<name>-key.pem`` (0600), each refused if it exists. Its own key: no server
    holds another's (the nodes' key stays the nodes')."""
    if not _NAME.fullmatch(name):
        raise TlsInitError(f"{name!r} is not a file name: lower-case letters, digits, '-'")
    names = check_hosts(hosts)
    try:
        ca_key = serialization.load_pem_private_key((ca_dir / CA_KEY).read_bytes(), None)
        ca_cert = x509.load_pem_x509_certificate((ca_dir / CA_CERT).read_bytes())
    except OSError as exc:
        raise TlsInitError(f"cannot read the CA in {ca_dir}: {exc.strerror}") from exc
    except ValueError as exc:
        raise TlsInitError(f"{ca_dir} does not hold a CA certificate and key") from exc
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey) or ca_key.public_key() != (
        ca_cert.public_key()
    ):
        raise TlsInitError(f"{ca_dir}: {CA_KEY} is not the key of {CA_CERT}")
    start = (now or _utc_now()) - datetime.timedelta(minutes=1)
    issued = IssuedCert(
        out / f"{name}.pem",
        out / f"{name}-key.pem",
        names,
        start + datetime.timedelta(days=BUS_DAYS),
    )
    try:
        out.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise TlsInitError(f"cannot make {out}: {exc.strerror}") from exc
    taken = [p.name for p in (issued.cert, issued.key) if p.exists()]
    if taken:
        raise TlsInitError(f"{out} already holds {', '.join(taken)}; nothing was written")
    key, cert = _leaf(ca_key, ca_cert.subject, names, start, issued.not_after)
    try:
        _write_new(issued.key, _key_bytes(key), 0o600)
        _write_new(issued.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    except OSError as exc:
        raise TlsInitError(f"cannot write in {out}: {exc.strerror}") from exc
    return issued


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """TLS for an HTTP server we run (the console, the model gateway): its certificate
    and key, TLS 1.2 or later. A pair that cannot be loaded is refused in one line."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except FileNotFoundError as exc:
        raise TlsInitError(f"cannot read {exc.filename or cert}: {exc.strerror}") from exc
    except (OSError, ssl.SSLError) as exc:
        raise TlsInitError(f"{cert} and {key} are not a certificate and its key") from exc
    return context


def serving_tls(cert: Path | None, key: Path | None, host: str) -> ssl.SSLContext | None:
    """How an HTTP server of ours listening on ``host`` speaks: HTTPS with ``cert`` and
    ``key``, or plain HTTP, which only a loopback address may serve ("TLS everywhere a
    network is crossed": a browser or a runtime on another host or container would send
    its session, its token and its prompts in clear). Raises :class:`TlsInitError`."""
    if (cert is None) != (key is None):
        raise TlsInitError("give both --tls-cert and --tls-key, or neither")
    if cert is None or key is None:
        if not is_loopback(host):
            raise TlsInitError(
                f"plain HTTP is served on loopback only: give --tls-cert and --tls-key "
                f"to serve on {host} (smf-assurance tls issue makes them)"
            )
        return None
    return server_context(cert, key)
