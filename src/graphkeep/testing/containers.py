"""``--graphkeep-servers=containers``: the session's servers as labelled testcontainers, one per
backend, from the image variables; removed when the session ends, and the next session on this
host sweeps what a killed one left."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from graphkeep.testing.addresses import dynamodb_url, free_ports, mongodb_url, redis_url
from graphkeep.testing.aws import set_placeholder_credentials
from graphkeep.testing.cluster import form_cluster
from graphkeep.testing.errors import GraphkeepTestingError
from graphkeep.testing.probes import dynamo_ping, mongo_ping, redis_ping, wait

IMAGE_VARIABLES = {
    "redis": "GRAPHKEEP_REDIS_IMAGE",
    "redis-cluster": "GRAPHKEEP_REDIS_IMAGE",
    "mongodb": "GRAPHKEEP_MONGODB_IMAGE",
    "dynamodb": "GRAPHKEEP_DYNAMODB_IMAGE",
    "valkey": "GRAPHKEEP_VALKEY_IMAGE",
    "valkey-cluster": "GRAPHKEEP_VALKEY_IMAGE",
}
DEFAULT_IMAGES = {
    "GRAPHKEEP_REDIS_IMAGE": "redis:7",
    "GRAPHKEEP_MONGODB_IMAGE": "mongo:7",
    "GRAPHKEEP_DYNAMODB_IMAGE": "motoserver/moto:5.2.5",
    "GRAPHKEEP_VALKEY_IMAGE": "valkey/valkey:8",
}
#: every container this plugin starts carries this label (and one naming its session)
LABEL = "dev.graphkeep.testing"


@dataclass
class ContainerServers:
    """One session's containers; :meth:`close` removes them."""

    session: str
    containers: list[Any] = field(default_factory=list)
    #: a server has answered: :meth:`close` then also sweeps the session's label
    served: bool = False

    def start(self, backend: str) -> str:
        """Start ``backend``'s container (from its image variable): its URL once it answers."""
        os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
        os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")
        client = docker_client()
        if not self.served:
            remove_orphans(client)
        variable = IMAGE_VARIABLES[backend]
        image = os.environ.get(variable) or DEFAULT_IMAGES[variable]
        ensure_image(client, image, variable)
        start = {
            "redis": self._redis,
            "redis-cluster": self._redis_cluster,
            "mongodb": self._mongodb,
            "dynamodb": self._dynamodb,
            "valkey": self._valkey,
            "valkey-cluster": self._valkey_cluster,
        }[backend]
        url = start(image)
        self.served = True
        return url

    def _container(
        self,
        image: str,
        port: int | None = None,
        *,
        bind: tuple[int, ...] | list[int] = (),
        script: str | None = None,
    ) -> Any:
        from testcontainers.core.container import DockerContainer

        labels = {
            LABEL: "1",
            f"{LABEL}.session": self.session,
            f"{LABEL}.host": socket.gethostname(),
            f"{LABEL}.pid": str(os.getpid()),
        }
        if script is None:
            container = DockerContainer(image, labels=labels)
        else:
            command: Any = ["-c", script]  # docker's API takes a list; the stub says str
            container = DockerContainer(image, command=command, entrypoint="sh", labels=labels)
        if port is not None:
            container.with_exposed_ports(port)
        for host_port in bind:
            container.with_bind_ports(host_port, host_port)
        self.containers.append(container)
        container.start()
        return container

    def _single(
        self,
        what: str,
        image: str,
        port: int,
        url_of: Callable[[str, int], str],
        ready: Callable[[str], bool],
    ) -> str:
        """One container serving ``port``: its URL (from the mapped port) once ``ready``."""
        container = self._container(image, port)
        url = url_of(container.get_container_host_ip(), int(container.get_exposed_port(port)))
        wait(f"{what} in {image}", lambda: ready(url), exited(container))
        return url

    def _redis(self, image: str) -> str:
        return self._single("Redis", image, 6379, redis_url, redis_ping)

    def _redis_cluster(self, image: str) -> str:
        return self._cluster("Redis Cluster", image, "redis-server")

    def _valkey(self, image: str) -> str:
        return self._single("Valkey", image, 6379, redis_url, redis_ping)

    def _valkey_cluster(self, image: str) -> str:
        return self._cluster("Valkey Cluster", image, "valkey-server")

    def _cluster(self, what: str, image: str, program: str) -> str:
        # three nodes in one container on host ports bound 1:1, announced as 127.0.0.1, so the
        # cluster's own addresses are the ones this machine reaches them at
        ports = free_ports(3)
        servers = " & ".join(
            f"{program} --port {p} --bind 0.0.0.0 --protected-mode no --cluster-enabled yes"
            f" --cluster-config-file /tmp/nodes-{p}.conf --cluster-announce-ip 127.0.0.1"
            f" --save '' --appendonly no"
            for p in ports
        )
        container = self._container(image, bind=ports, script=f"{servers} & wait")
        return form_cluster(f"{what} in {image}", ports, exited(container))

    def _mongodb(self, image: str) -> str:
        return self._single("MongoDB", image, 27017, mongodb_url, mongo_ping)

    def _dynamodb(self, image: str) -> str:
        set_placeholder_credentials()
        port = 8000 if "dynamodb-local" in image else 5000
        return self._single("DynamoDB", image, port, dynamodb_url, dynamo_ping)

    def close(self) -> None:
        """Remove every container of this session (idempotent)."""
        while self.containers:
            container = self.containers.pop()
            try:
                container.stop()
            except Exception:  # noqa: BLE001 — already gone; the label sweep below still runs
                pass
        if self.served:
            remove_labelled(self.session)


def docker_client() -> Any:
    """A Docker client whose engine answers, with testcontainers importable."""
    try:
        import docker
        from testcontainers.core.container import DockerContainer  # noqa: F401
    except ImportError as exc:
        raise GraphkeepTestingError(
            f"--graphkeep-servers=containers needs testcontainers: pip install"
            f" 'graphkeep[testing]' ({exc})"
        ) from exc
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # noqa: BLE001 — docker raises many kinds for "no engine"
        raise GraphkeepTestingError(
            "--graphkeep-servers=containers: no Docker engine answers (start one: `dockerd`,"
            " Docker Desktop, or `./dev containers up` in graphkeep's repository; or set"
            f" DOCKER_HOST), or use --graphkeep-servers=env ({type(exc).__name__})"
        ) from exc
    return client


def ensure_image(client: Any, image: str, variable: str) -> None:
    """``image`` on the engine, pulled if missing; else one line naming ``variable``."""
    import docker.errors

    try:
        client.images.get(image)
        return
    except docker.errors.ImageNotFound:
        pass
    try:
        client.images.pull(image)
    except Exception as exc:  # noqa: BLE001 — registry unreachable, unknown image, auth
        raise GraphkeepTestingError(
            f"image {image} is not on this Docker engine and cannot be pulled"
            f" ({type(exc).__name__}); set {variable} to an image you have (in graphkeep's"
            " repository `./dev containers up` builds local ones and writes their names to"
            " .services/containers.env)"
        ) from exc


def remove_orphans(client: Any) -> None:
    """Remove what an earlier session on this host left when it was killed (kill -9: no exit)."""
    host = socket.gethostname()
    for container in client.containers.list(all=True, filters={"label": f"{LABEL}.host={host}"}):
        pid = int(container.labels.get(f"{LABEL}.pid", "0") or 0)
        try:
            if pid > 0:
                os.kill(pid, 0)
                continue  # that session is still running
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # alive, someone else's
        container.remove(force=True)


def remove_labelled(session: str) -> None:
    """Remove every container labelled with ``session`` (best effort, at exit)."""
    try:
        import docker

        client = docker.from_env()
        for container in client.containers.list(
            all=True, filters={"label": f"{LABEL}.session={session}"}
        ):
            container.remove(force=True)
    except Exception:  # noqa: BLE001 — best effort at exit; `docker ps -a --filter label=` shows leftovers
        pass


def exited(container: Any) -> Callable[[], str | None]:
    """The container's last log lines once it has exited, else None."""

    def check() -> str | None:
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        if wrapped.status != "exited":
            return None
        return str(wrapped.logs(tail=20).decode(errors="replace"))

    return check
