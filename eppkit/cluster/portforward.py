"""The host reaching a Pod's port through the API server (what ``kubectl port-forward`` does), for a cluster whose
pods this machine cannot reach itself (a remote node's loopback, a pod network without a route from here).

:class:`PortForward` listens on ``127.0.0.1:<local port>``; each connection made to it is one WebSocket to the API
server's ``pods/<name>/portforward?ports=<port>`` (subprotocol ``v4.channel.k8s.io``: channel 0 carries the
connection's bytes, channel 1 the kubelet's error; each channel's first frame from the server is the port, two
bytes little-endian), through which the kubelet dials the port in the Pod's network namespace. Written by hand on
aiohttp (already the kit's HTTP client): the maintained clients that speak it (kubectl, the ``kubernetes`` Python
package) are a Go binary to build or a second Kubernetes client beside lightkube.

Its loop runs on a thread of its own; :meth:`close` stops listening and ends every open connection.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import aiohttp

SUBPROTOCOL = "v4.channel.k8s.io"
DATA, ERROR = 0, 1  # the channels of the one port asked for


@dataclass(frozen=True)
class ApiAccess:
    """How to reach an API server: its URL, an SSL context (its CA, a client certificate), request headers (a
    bearer token)."""

    server: str
    ssl_context: ssl.SSLContext
    headers: dict[str, str]

    @classmethod
    def from_kubeconfig(cls, path: str | Path, context: str | None = None) -> ApiAccess:
        """The current (or ``context``'s) cluster and user of a kubeconfig: a bearer token or a client certificate,
        the cluster's CA (files or inline data). An exec or auth-provider user is refused: say what to give."""
        from eppkit.components import kubeapi

        return cls.from_config(kubeapi.load(path).get(context_name=context), path)

    @classmethod
    def from_config(cls, single, path: str | Path) -> ApiAccess:
        """The same of a kubeconfig already parsed (``single``: one context of a lightkube KubeConfig, read from
        ``path``)."""
        cluster, user = single.cluster, single.user
        ctx = ssl.create_default_context()
        if cluster.insecure:
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        elif cluster.certificate_auth_data:
            ctx.load_verify_locations(cadata=base64.b64decode(cluster.certificate_auth_data).decode())
        elif cluster.certificate_auth:
            ctx.load_verify_locations(cafile=single.abs_file(cluster.certificate_auth))
        headers = {}
        if user is not None and user.token:
            headers["Authorization"] = f"Bearer {user.token}"
        elif user is not None and (user.client_cert or user.client_cert_data):
            ctx.load_cert_chain(*_client_cert_files(single, user))
        elif user is not None and (user.exec or user.auth_provider):
            raise ValueError(f"{path}: its user authenticates by an exec or auth-provider plugin, which the kit's "
                             "port forwarding does not run: give a kubeconfig with a token or a client certificate "
                             "(e.g. a ServiceAccount's token)")
        return cls(cluster.server.rstrip("/"), ctx, headers)


def _client_cert_files(single, user) -> tuple[str, str]:
    """The client certificate and key as files (ssl loads a chain from files only)."""
    if user.client_cert:
        return single.abs_file(user.client_cert), single.abs_file(user.client_key)
    folder = Path(tempfile.mkdtemp(prefix="eppkit-kubeconfig-"))
    cert, key = folder / "client.crt", folder / "client.key"
    cert.write_bytes(base64.b64decode(user.client_cert_data))
    key.write_bytes(base64.b64decode(user.client_key_data))
    key.chmod(0o600)
    return str(cert), str(key)


class PortForwardError(RuntimeError):
    pass


class PortForward:
    """``127.0.0.1:local_port`` forwarded to ``port`` of Pod ``namespace/pod`` (see the module docstring).
    ``local_port`` 0: one the system picks (``.local_port`` once started)."""

    def __init__(self, access: ApiAccess, namespace: str, pod: str, port: int, local_port: int = 0,
                 host: str = "127.0.0.1"):
        self.access, self.namespace, self.pod, self.port = access, namespace, pod, port
        self.host, self.local_port = host, local_port
        self.connections = 0  # accepted so far
        self.errors: list[str] = []  # what the kubelet or the API server said when a connection failed
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"forward-{pod}-{port}", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task] = set()

    @property
    def url(self) -> str:
        return (f"{self.access.server}/api/v1/namespaces/{self.namespace}/pods/{self.pod}/portforward"
                f"?ports={self.port}")

    def start(self) -> PortForward:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=10)
        return self

    async def _listen(self) -> None:
        self._session = aiohttp.ClientSession(headers=self.access.headers)
        self._server = await asyncio.start_server(self._accepted, self.host, self.local_port)
        self.local_port = self._server.sockets[0].getsockname()[1]

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            await self._pump(reader, writer)
        except asyncio.CancelledError:  # close(): the connection just ends (asyncio's callback reads no error)
            pass
        except Exception as exc:  # said once, in words; the local connection just closes
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with self._session.ws_connect(self.url, protocols=(SUBPROTOCOL,), ssl=self.access.ssl_context,
                                            autoping=True, max_msg_size=0) as ws:
            seen_port: set[int] = set()

            async def upstream() -> None:  # the local client's bytes, on channel 0
                while chunk := await reader.read(65536):
                    await ws.send_bytes(bytes([DATA]) + chunk)
                await ws.close()

            sending = asyncio.ensure_future(upstream())
            try:
                async for message in ws:
                    if message.type != aiohttp.WSMsgType.BINARY or not message.data:
                        continue
                    channel, payload = message.data[0], message.data[1:]
                    if channel not in seen_port:  # each channel's first frame: the port, two bytes
                        seen_port.add(channel)
                        payload = payload[2:]
                    if channel == DATA and payload:
                        writer.write(payload)
                        await writer.drain()
                    elif channel == ERROR and payload:
                        raise PortForwardError(payload.decode(errors="replace").strip())
            finally:
                sending.cancel()

    def close(self) -> None:
        """Stop listening and end every open connection; the thread ends."""
        if not self._thread.is_alive():
            return

        async def shut() -> None:
            if self._server is not None:
                self._server.close()
            open_ones = list(self._tasks)
            for task in open_ones:
                task.cancel()
            await asyncio.gather(*open_ones, return_exceptions=True)
            if self._session is not None:
                await self._session.close()

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
