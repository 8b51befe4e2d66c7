"""The bus's local CA and certificate (``smf_assurance.ops.local.tls``), and how a client
is told to trust it (``bus_access.bus_tls``).

Proves: ``init_tls`` makes a CA that can sign only end certificates and a certificate
it signed for every name asked (and loopback), usable by servers and by routes; keys
are 0600; a folder already holding any of the four files is refused with nothing
written or changed; a name that is no host is refused; the node config's includes
name the files by absolute path and ask TLS first of clients and verification of
routes. A client given ``SMF_NATS_CA`` trusts that CA only, checks the name, speaks
TLS first; an unreadable or empty CA file is refused naming the variable.

Does not prove: that nats-server accepts these files (``tests/bus/test_bus_tls.py``
starts a cluster on them).
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from smf_assurance.ops.local.tls import (
    ALWAYS_HOSTS,
    BUS_DAYS,
    CA_KEY,
    MAX_HOSTS,
    NATS_CLIENT_INCLUDE,
    NATS_ROUTE_INCLUDE,
    TlsInitError,
    check_hosts,
    init_tls,
    issue_cert,
    server_context,
    serving_tls,
    write_nats_includes,
)
from smf_assurance.subjects.bus_access import (
    CA_UNUSABLE,
    TLS_CA_ENV,
    BusCredential,
    CredentialFileError,
    bus_tls,
    connect_options,
)

NOW = datetime.datetime(2026, 12, 4, 12, 0, tzinfo=datetime.UTC)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_ca_signs_a_certificate_for_every_name_asked(tmp_path: Path) -> None:
    files = init_tls(tmp_path / "tls", ["nats-1", "NATS-2.firm.example", "10.0.0.7"], now=NOW)
    ca = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    bus = x509.load_pem_x509_certificate(files.cert.read_bytes())
    bus.verify_directly_issued_by(ca)
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert (constraints.ca, constraints.path_length) == (True, 0)
    assert not bus.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usages = bus.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    names = bus.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost", "nats-1", "nats-2.firm.example"]
    assert names.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("10.0.0.7"),
    ]
    assert files.hosts == ("localhost", "127.0.0.1", "nats-1", "nats-2.firm.example", "10.0.0.7")
    assert bus.not_valid_before_utc == NOW - datetime.timedelta(minutes=1)
    assert bus.not_valid_after_utc == files.not_after
    assert files.not_after - bus.not_valid_before_utc == datetime.timedelta(days=BUS_DAYS)
    assert (mode(files.ca_key), mode(files.key)) == (0o600, 0o600)
    assert (mode(files.ca_cert), mode(files.cert)) == (0o644, 0o644)
    assert mode(files.directory) == 0o700


def test_a_folder_holding_any_of_the_files_is_refused_and_left_as_it_was(
    tmp_path: Path,
) -> None:
    first = init_tls(tmp_path / "tls", (), now=NOW)
    kept = {p.name: p.read_bytes() for p in first.directory.iterdir()}
    with pytest.raises(TlsInitError, match=re.escape("already holds ca.pem, ca-key.pem, bus.pem")):
        init_tls(first.directory, ())
    assert {p.name: p.read_bytes() for p in first.directory.iterdir()} == kept
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "bus-key.pem").write_bytes(b"someone's key")
    with pytest.raises(TlsInitError, match=re.escape("already holds bus-key.pem")):
        init_tls(lone, ())
    assert sorted(p.name for p in lone.iterdir()) == ["bus-key.pem"]
    assert (lone / "bus-key.pem").read_bytes() == b"someone's key"


@pytest.mark.parametrize(
    "host", ["bad host", "", "-lead", "a..b", "under_score", "x" * 64, "1.2.3.4.5/8"]
)
def test_a_name_that_is_no_host_is_refused(tmp_path: Path, host: str) -> None:
    with pytest.raises(TlsInitError, match="is not a host name or an IP address"):
        init_tls(tmp_path / "tls", [host])
    assert not (tmp_path / "tls").exists()


def test_names_are_normalised_kept_once_and_bounded() -> None:
    assert check_hosts(["LOCALHOST", "::1", "0:0:0:0:0:0:0:1", " nats-1 "]) == (
        *ALWAYS_HOSTS,
        "::1",
        "nats-1",
    )
    many = [f"n{i}" for i in range(MAX_HOSTS - len(ALWAYS_HOSTS))]
    assert len(check_hosts(many)) == MAX_HOSTS
    with pytest.raises(TlsInitError, match=f"at most {MAX_HOSTS}"):
        check_hosts([*many, "one-more"])


def test_the_includes_ask_tls_first_of_clients_and_verify_routes(tmp_path: Path) -> None:
    files = init_tls(tmp_path / "tls", ())
    client = (files.directory / NATS_CLIENT_INCLUDE).read_text()
    route = (files.directory / NATS_ROUTE_INCLUDE).read_text()
    for text in (client, route):
        assert f'cert_file: "{files.cert.resolve()}"' in text
        assert f'key_file: "{files.key.resolve()}"' in text
    assert "handshake_first: true" in client
    assert "ca_file" not in client
    assert f'ca_file: "{files.ca_cert.resolve()}"' in route
    assert "verify: true" in route
    write_nats_includes(files.directory, None)
    assert (files.directory / NATS_CLIENT_INCLUDE).read_text() == ""
    assert (files.directory / NATS_ROUTE_INCLUDE).read_text() == ""
    assert not list(files.directory.glob(".*.tmp"))


@pytest.mark.claim("bus-access.tls-across-the-network")
def test_a_client_given_the_ca_trusts_it_alone_and_speaks_tls_first(tmp_path: Path) -> None:
    files = init_tls(tmp_path / "tls", ())
    assert bus_tls({}) == {}
    options = bus_tls({TLS_CA_ENV: str(files.ca_cert)})
    assert options["tls_handshake_first"] is True
    context = options["tls"]
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    trusted = context.get_ca_certs()
    assert len(trusted) == 1
    assert "SMF Assurance local bus CA" in str(trusted[0]["subject"])


@pytest.mark.parametrize("content", [None, b"", b"not a certificate\n"])
def test_a_ca_file_that_is_missing_or_holds_no_certificate_is_refused(
    tmp_path: Path, content: bytes | None
) -> None:
    ca = tmp_path / "ca.pem"
    if content is not None:
        ca.write_bytes(content)
    with pytest.raises(CredentialFileError) as refused:
        bus_tls({TLS_CA_ENV: str(ca)})
    assert refused.value.reason_code == CA_UNUSABLE
    assert f"{TLS_CA_ENV}={ca}" in refused.value.detail


def test_connect_options_carry_the_credential_and_the_tls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = init_tls(tmp_path / "tls", ())
    seed = tmp_path / "runtime.nkey"
    credential = BusCredential("hermes-runtime", seed)
    monkeypatch.delenv(TLS_CA_ENV, raising=False)
    assert connect_options(credential) == credential.connect_options()
    assert connect_options(None) == {}
    monkeypatch.setenv(TLS_CA_ENV, str(files.ca_cert))
    options = connect_options(credential)
    assert options["nkeys_seed"] == str(seed)
    assert options["inbox_prefix"] == "_INBOX.hermes-runtime"
    assert options["tls_handshake_first"] is True
    assert set(connect_options(None)) == {"tls", "tls_handshake_first"}


def test_a_server_certificate_is_its_own_key_signed_by_the_ca(tmp_path: Path) -> None:
    ca = init_tls(tmp_path / "ca", (), now=NOW)
    issued = issue_cert(ca.directory, "console", ["console.firm.example"], tmp_path / "c", now=NOW)
    cert = x509.load_pem_x509_certificate(issued.cert.read_bytes())
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.ca_cert.read_bytes()))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost", "console.firm.example"]
    assert issued.key.read_bytes() not in (ca.key.read_bytes(), ca.ca_key.read_bytes())
    assert (mode(issued.key), mode(issued.cert)) == (0o600, 0o644)
    assert (issued.cert.name, issued.key.name) == ("console.pem", "console-key.pem")
    assert server_context(issued.cert, issued.key).minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(TlsInitError, match=re.escape("already holds console.pem")):
        issue_cert(ca.directory, "console", (), tmp_path / "c")


def test_issuing_needs_the_cas_own_key_and_a_plain_name(tmp_path: Path) -> None:
    ca = init_tls(tmp_path / "ca", ())
    other = init_tls(tmp_path / "other", ())
    with pytest.raises(TlsInitError, match="is not a file name"):
        issue_cert(ca.directory, "../console", (), tmp_path / "c")
    (ca.directory / CA_KEY).replace(tmp_path / "kept-elsewhere.pem")
    with pytest.raises(TlsInitError, match="cannot read the CA in"):
        issue_cert(ca.directory, "console", (), tmp_path / "c")
    (ca.directory / CA_KEY).write_bytes(other.ca_key.read_bytes())
    with pytest.raises(TlsInitError, match=re.escape("ca-key.pem is not the key of ca.pem")):
        issue_cert(ca.directory, "console", (), tmp_path / "c")
    (ca.directory / CA_KEY).write_bytes(b"not a key")
    with pytest.raises(TlsInitError, match="does not hold a CA certificate and key"):
        issue_cert(ca.directory, "console", (), tmp_path / "c")
    assert not (tmp_path / "c").exists() or not list((tmp_path / "c").iterdir())


def test_plain_http_is_served_on_loopback_only(tmp_path: Path) -> None:
    ca = init_tls(tmp_path / "ca", ())
    for host in ("127.0.0.1", "::1", "localhost", "127.9.9.9"):
        assert serving_tls(None, None, host) is None
    for host in ("0.0.0.0", "::", "10.0.0.7", "console.firm.example"):
        with pytest.raises(TlsInitError, match=f"to serve on {re.escape(host)} "):
            serving_tls(None, None, host)
    with pytest.raises(TlsInitError, match="give both --tls-cert and --tls-key"):
        serving_tls(ca.cert, None, "127.0.0.1")
    with pytest.raises(TlsInitError, match="give both --tls-cert and --tls-key"):
        serving_tls(None, ca.key, "0.0.0.0")
    assert serving_tls(ca.cert, ca.key, "0.0.0.0") is not None
    with pytest.raises(TlsInitError, match="are not a certificate and its key"):
        serving_tls(ca.cert, ca.ca_key, "0.0.0.0")
    with pytest.raises(TlsInitError, match="cannot read"):
        serving_tls(tmp_path / "missing.pem", ca.key, "0.0.0.0")
