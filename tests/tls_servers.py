"""TLS-only servers the TLS tests start, with certificates they make.

One private CA signs a server certificate for ``127.0.0.1`` (an IP SAN only: reaching the
same server as ``localhost``, or a Redis server as ``127.0.0.2``, is a wrong host name) and
a client certificate (Redis asks for one: ``tls-auth-clients yes``); a second CA that signed
nothing stands for a certificate the client does not trust. The servers: Redis 7 and Valkey 8
on a TLS port only, a 3-node Cluster of each whose bus is TLS too, FerretDB's TLS listener,
and moto_server over HTTPS (``tools/moto_server.py``'s ``-c``/``-k``). Each is started once
per test module, when a test first asks for it (about a second each, a Cluster three), and
dies with the session (:class:`graphkeep.testing.processes.Server`).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import socket
import ssl
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from urllib.parse import quote, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from graphkeep.testing.addresses import free_ports
from graphkeep.testing.local import ferretdb_command
from graphkeep.testing.probes import wait
from graphkeep.testing.processes import Server

REPO = Path(__file__).resolve().parent.parent
SLOTS = 16384


# -- certificates ----------------------------------------------------------------------


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _ca(directory: Path, stem: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(f"graphkeep test {stem}"))
        .issuer_name(_name(f"graphkeep test {stem}"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    (directory / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _leaf(
    directory: Path,
    stem: str,
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
) -> None:
    """A certificate for 127.0.0.1 (server and client use alike: a cluster node is both)."""
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(f"graphkeep test {stem}"))
        .issuer_name(ca[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca[1].public_key()), critical=False
        )
        .sign(ca[1], hashes.SHA256())
    )
    (directory / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, directory / f"{stem}.key")
    # one file holding both (FerretDB and moto take a key file each; PyMongo a combined one)
    both = (directory / f"{stem}.pem").read_bytes() + (directory / f"{stem}.key").read_bytes()
    (directory / f"{stem}-combined.pem").write_bytes(both)


@dataclass(frozen=True)
class Certificates:
    """The files of one test module's certificates."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def other_ca(self) -> Path:
        """A CA that signed none of these: a server it is asked to trust is untrusted."""
        return self.directory / "other-ca.pem"

    @property
    def server_cert(self) -> Path:
        return self.directory / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.directory / "server.key"

    @property
    def client_cert(self) -> Path:
        return self.directory / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.directory / "client.key"

    @property
    def client_combined(self) -> Path:
        return self.directory / "client-combined.pem"


def make_certificates(directory: Path) -> Certificates:
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca(directory, "ca")
    _ca(directory, "other-ca")
    _leaf(directory, "server", ca)
    _leaf(directory, "client", ca)
    return Certificates(directory)


# -- probes ----------------------------------------------------------------------------


def _tls_context(certs: Certificates) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    return context


def _redis_command(certs: Certificates, port: int, *args: str) -> bytes:
    """One command to the TLS Redis node on 127.0.0.1 ``port`` (redis-py itself: the probe
    must not depend on graphkeep's client code under test)."""
    import redis

    client = redis.Redis(
        host="127.0.0.1",
        port=port,
        ssl=True,
        ssl_ca_certs=str(certs.ca),
        ssl_certfile=str(certs.client_cert),
        ssl_keyfile=str(certs.client_key),
        socket_timeout=2,
    )
    with client:
        reply = client.execute_command(*args)
    return reply if isinstance(reply, bytes) else str(reply).encode()


def _redis_ping(certs: Certificates, port: int) -> bool:
    return _redis_command(certs, port, "PING") == b"True"


def _cluster_state(certs: Certificates, port: int) -> dict[str, str]:
    text = _redis_command(certs, port, "CLUSTER", "INFO").decode()
    return dict(line.split(":", 1) for line in text.split() if ":" in line)


def _https_up(certs: Certificates, port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as raw:
        with _tls_context(certs).wrap_socket(raw, server_hostname="127.0.0.1"):
            return True


def _mongo_up(certs: Certificates, port: int) -> bool:
    import pymongo

    client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(
        f"mongodb://127.0.0.1:{port}/?tls=true&tlsCAFile={quote(str(certs.ca))}",
        serverSelectionTimeoutMS=2000,
    )
    with client:
        client.admin.command("ping")
    return True


# -- servers ---------------------------------------------------------------------------


def _program(variable: str, name: str) -> str:
    return os.environ.get(variable) or shutil.which(name) or name


def _redis_tls_command(program: str, port: int, data: Path, certs: Certificates) -> list[str]:
    return [
        program,
        # 127.0.0.2 too: the same server by an address its certificate does not name
        *("--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1 127.0.0.2"),
        *("--tls-cert-file", str(certs.server_cert), "--tls-key-file", str(certs.server_key)),
        *("--tls-ca-cert-file", str(certs.ca), "--tls-auth-clients", "yes"),
        *("--dir", str(data), "--save", "", "--appendonly", "no", "--daemonize", "no"),
    ]


class TlsServers:
    """The module's TLS servers, each started the first time a test asks for it."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.certs = make_certificates(home / "certs")
        self.servers: list[Server] = []
        self.urls: dict[str, str] = {}
        #: the plain port of each started family (TLS against it must fail as TLS)
        self.plain: dict[str, str] = {}

    # the query string a Redis client needs: trust the CA, present the client certificate
    def redis_query(self, ca: Path | None = None) -> str:
        c = self.certs
        return (
            f"ssl_ca_certs={quote(str(ca or c.ca))}&ssl_certfile={quote(str(c.client_cert))}"
            f"&ssl_keyfile={quote(str(c.client_key))}&ssl_cert_reqs=required"
        )

    def _start(self, server: Server) -> None:
        self.servers.append(server)
        server.up(timeout=60)

    def url(self, backend: str) -> str:
        """The TLS URL of ``backend``'s server (started now if it does not run yet)."""
        if backend not in self.urls:
            self.urls[backend] = getattr(self, "_" + backend.replace("-", "_"))()
        return self.urls[backend]

    def _redis(self, variable: str = "GRAPHKEEP_REDIS_SERVER", name: str = "redis") -> str:
        (port,) = free_ports(1)
        data = self.home / name
        program = _program(variable, f"{name}-server")
        command = _redis_tls_command(program, port, data, self.certs)
        ready = partial(_redis_ping, self.certs, port)
        self._start(Server(f"tls{name}", port, command, ready, self.home, True, data))
        return f"rediss://127.0.0.1:{port}/0?{self.redis_query()}"

    def _valkey(self) -> str:
        return self._redis("GRAPHKEEP_VALKEY_SERVER", "valkey")

    def _cluster(self, program: str, name: str) -> str:
        ports = free_ports(3)
        nodes = []
        for port in ports:
            data = self.home / name / str(port)
            command = [
                *_redis_tls_command(program, port, data, self.certs),
                *("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
                *("--tls-cluster", "yes", "--tls-replication", "yes"),
            ]
            ready = partial(_redis_ping, self.certs, port)
            nodes.append(Server(f"tls{name}-{port}", port, command, ready, self.home, True, data))
        for node in nodes:
            self._start(node)
        share = SLOTS // len(ports)
        for i, port in enumerate(ports):
            last = SLOTS if i == len(ports) - 1 else (i + 1) * share
            _redis_command(
                self.certs, port, "CLUSTER", "ADDSLOTSRANGE", str(i * share), str(last - 1)
            )
            if i:
                _redis_command(self.certs, port, "CLUSTER", "MEET", "127.0.0.1", str(ports[0]))
        wait(
            f"TLS {name}",
            lambda: all(
                _cluster_state(self.certs, p).get("cluster_state") == "ok"
                and _cluster_state(self.certs, p).get("cluster_known_nodes") == "3"
                for p in ports
            ),
            timeout=60,
        )
        return f"rediss+cluster://127.0.0.1:{ports[0]}/0?{self.redis_query()}"

    def _redis_cluster(self) -> str:
        return self._cluster(_program("GRAPHKEEP_REDIS_SERVER", "redis-server"), "redis-cluster")

    def _valkey_cluster(self) -> str:
        return self._cluster(_program("GRAPHKEEP_VALKEY_SERVER", "valkey-server"), "valkey-cluster")

    def _mongodb(self) -> str:
        program = os.environ.get("GRAPHKEEP_MONGODB_SERVER") or str(
            REPO / ".services" / "bin" / "ferretdb"
        )
        plain, tls = free_ports(2)
        data = self.home / "ferretdb"
        command = [
            *ferretdb_command(program, data, plain),
            f"--listen-tls=127.0.0.1:{tls}",
            f"--listen-tls-cert-file={self.certs.server_cert}",
            f"--listen-tls-key-file={self.certs.server_key}",
        ]
        ready = partial(_mongo_up, self.certs, tls)
        self._start(Server("tlsferretdb", tls, command, ready, self.home, True, data))
        self.plain["mongodb"] = f"127.0.0.1:{plain}"
        return f"mongodb://127.0.0.1:{tls}/graphkeep?tls=true&tlsCAFile={quote(str(self.certs.ca))}"

    def _dynamodb(self) -> str:
        program = os.environ.get("GRAPHKEEP_DYNAMODB_SERVER") or (
            f"{sys.executable} {REPO / 'tools' / 'moto_server.py'}"
        )
        (port,) = free_ports(1)
        command = [
            *program.split(),
            *("-H", "127.0.0.1", "-p", str(port)),
            *("-c", str(self.certs.server_cert), "-k", str(self.certs.server_key)),
        ]
        ready = partial(_https_up, self.certs, port)
        self._start(Server("tlsdynamodb", port, command, ready, self.home, True))
        endpoint = quote(f"https://127.0.0.1:{port}", safe="")
        return (
            f"dynamodb://graphkeep?region=us-east-1&endpoint_url={endpoint}"
            f"&verify={quote(str(self.certs.ca), safe='')}"
        )

    def restart(self, backend: str) -> None:
        """Stop ``backend``'s single server and start it again on its port (its data gone)."""
        port = int(urlsplit(self.url(backend)).port or 0)
        (server,) = [s for s in self.servers if s.port == port]
        server.down()
        server.up(timeout=60)

    def close(self) -> None:
        for server in reversed(self.servers):
            server.down()
