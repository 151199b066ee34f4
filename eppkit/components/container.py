"""A kit component in its own container: the docker runtime's twin of ManagedProcess.

:class:`ManagedContainer` has ManagedProcess's surface (``name``, ``log_path``, ``start``,
``wait_ready``, ``stop``, ``kill``, ``is_running``, ``returncode``, ``read_log``,
``log_tail``) so the readiness strategies, the testbeds and the CLI treat both alike.
Underneath it is a testcontainers ``DockerContainer`` with host networking: every
component binds 127.0.0.1 itself, so port mappings (and testcontainers' port waits) play
no part; readiness is polled on the endpoint or read from the log.

Guarantees that no container outlives the kit, without Ryuk (which would have to be
pulled, and needs a bridge network):

- every container is labelled ``eppkit=1`` plus this session's id and its owner (boot id,
  pid and start time of the Python process that made it);
- every started container is registered and stopped at interpreter exit;
- a watchdog process (:mod:`eppkit.components.reaper`) holds the read end of a pipe
  whose write end only this process has; when this process ends in any way (even
  SIGKILL) the pipe closes and the watchdog removes the session's containers;
- :func:`sweep` removes labelled containers whose owner is gone (run at session start and
  end); containers of other live sessions on the same engine are left alone.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import sys
import threading
from pathlib import Path
from typing import Sequence

from eppkit.components import reaper
from eppkit.components.base import FromImage, LiveSet
from eppkit.components.owner import LABEL, SESSION, TEST_SESSION_LABEL, labels, owner_alive, owner_id  # noqa: F401

_counter = itertools.count(1)
_configured = False


def remove_workers(tag: str) -> list[str]:
    """Force-remove the containers of test session ``tag``'s workers (``<tag>/<worker id>``); their names."""
    return _remove([c for c in find({"label": [TEST_SESSION_LABEL]})
                    if c.labels.get(TEST_SESSION_LABEL, "").startswith(f"{tag}/")])


# -- the engine ------------------------------------------------------------------------------
def docker_client(timeout: float = 60):
    import docker

    return docker.from_env(timeout=timeout)


def engine_version(timeout: float = 3.0) -> str | None:
    """The Docker engine's version, or None when no engine answers within ``timeout``."""
    try:
        client = docker_client(timeout=timeout)
        try:
            return str(client.version().get("Version", "?"))
        finally:
            client.close()
    except Exception:
        return None


def _configure_testcontainers() -> None:
    """Ryuk stays off unless the user asked for it: it must be pulled and needs a bridge network.

    Our own labels, finalizers and watchdog do its job (see the module docstring).
    """
    global _configured
    if _configured:
        return
    from testcontainers.core.config import testcontainers_config

    if "TESTCONTAINERS_RYUK_DISABLED" not in os.environ:
        testcontainers_config.ryuk_disabled = True
    _configured = True


def find(filters: dict, client=None) -> list:
    """Every container (running or not) matching docker's ``filters``; with ``client``, through it."""
    own = client is None
    client = client or docker_client()
    try:
        # ignore_removed: a container removed between docker's list and its inspect (another worker's, a watchdog's)
        # is skipped; docker-py raises NotFound for it otherwise
        return client.containers.list(all=True, ignore_removed=True, filters=filters)
    finally:
        if own:
            client.close()


def _remove(containers: list) -> list[str]:
    removed = []
    for c in containers:
        try:
            c.remove(force=True, v=True)
            removed.append(c.name)
        except Exception:  # already gone, or being removed by someone else
            pass
    return removed


def session_containers(session: str = SESSION) -> list:
    return find({"label": [f"{LABEL}.session={session}"]})


def remove_session(session: str = SESSION) -> list[str]:
    """Force-remove every container of ``session``; returns their names."""
    return _remove(session_containers(session))


def sweep() -> list[str]:
    """Remove eppkit containers whose owning process is gone; returns their names.

    Containers owned by a live process (another developer's session, a running
    ``eppkit up``) are left alone.
    """
    # Only containers the kit started carry an owner. A container with the image's eppkit=1 but no owner is a step
    # of an image build in progress (it inherits the label of the image it builds on): removing it kills the build.
    orphans = [c for c in find({"label": [f"{LABEL}=1", f"{LABEL}.owner"]})
               if not owner_alive(c.labels.get(f"{LABEL}.owner", ""))]
    return _remove(orphans)


# -- the component wrapper ---------------------------------------------------------------------
class ManagedContainer(FromImage):
    """One component in one container, started in a ``with``, logged to a file, always removed."""

    def __init__(self, name: str, image: str, argv: Sequence[str], log_path: Path, *,
                 entrypoint: Sequence[str] | None = None, extra_labels: dict[str, str] | None = None):
        super().__init__(name, image, argv, log_path, entrypoint=entrypoint, extra_labels=extra_labels)
        self._tc = None  # testcontainers DockerContainer
        self._container = None  # docker-py Container
        self._follower: threading.Thread | None = None
        self._log_file = None
        self._exit_code: int | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "ManagedContainer":
        from testcontainers.core.container import DockerContainer

        _configure_testcontainers()
        reaper.watch(__name__, SESSION)
        if self._tc is not None:  # started before (e.g. killed by a fault test): a fresh container
            self._remove()
        seq = next(_counter)
        cname = re.sub(r"[^a-zA-Z0-9_.-]", "-", f"eppkit-{SESSION[:8]}-{seq}-{self.name}")
        tc = DockerContainer(self.image, command=self.argv)
        tc.with_name(cname)
        tc.with_envs(PYTHONUNBUFFERED="1", HOME="/tmp", **self.env)
        for path, mode in self.mounts.items():
            tc.with_volume_mapping(path, path, mode)
        kwargs = dict(
            # Host networking: every component binds 127.0.0.1 itself; nothing leaves loopback.
            # `network` too, so testcontainers does not pick a network of its own.
            network_mode="host", network="host",
            labels=labels(self.name, **self.extra_labels),
            # docker-init as PID 1 forwards signals and reaps; SIGINT is how our components
            # flush spans and logs before they exit (the same first signal as ManagedProcess).
            init=True, stop_signal="SIGINT",
            # Files written into bind mounts belong to the user, not to root.
            user=f"{os.getuid()}:{os.getgid()}",
        )
        if self.entrypoint is not None:
            kwargs["entrypoint"] = self.entrypoint
        if self.cwd is not None:
            kwargs["working_dir"] = self.cwd
        tc.with_kwargs(**kwargs)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab", buffering=0)
        self._tc = tc
        self._exit_code = None
        _live.add(self)
        try:
            tc.start()
        except Exception as exc:
            self._remove()
            raise RuntimeError(f"cannot start container {cname} for {self.name}: {exc} (image {self.image})") from exc
        self._container = tc.get_wrapped_container()
        self._follower = threading.Thread(target=self._copy_output, args=(self._container, self._log_file),
                                          name=f"logs-{self.name}", daemon=True)
        self._follower.start()
        return self

    @staticmethod
    def _copy_output(container, log_file) -> None:
        """Copy the container's output into log_path as it comes (the file is what readiness reads).

        Followed from the engine's log file, not attached: an attached reader that falls behind (a busy test
        process) blocks the container's own writes, and under a load test Envoy and Jaeger stalled (every
        trace of a docker load run was lost). A follower costs the engine one inotify instance per container
        (see eppkit.gateway.process.cannot_watch). A container that has exited already gives its log and the
        copy ends."""
        try:
            for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
                log_file.write(chunk)
        except Exception:  # the container was removed under us: nothing more to copy
            pass

    def stop(self, grace_s: float = 5.0) -> int | None:
        """SIGINT, a bounded wait, then SIGKILL (docker stop does both), then remove.

        SIGINT first because Envoy and our services flush (spans, logs) on it; the removal
        afterwards is what guarantees that no container survives a wedged component.
        """
        if self._tc is None:
            return None
        code = None
        container = self._container
        if container is not None:
            try:
                container.stop(timeout=max(1, math.ceil(grace_s)))
                code = self.returncode()
            except Exception:
                pass
        self._remove()
        return code

    def kill(self) -> None:
        """Hard kill, for fault tests: no chance to flush. The container stays until stop()."""
        if self._container is not None and self.is_running():
            try:
                self._container.kill(signal="SIGKILL")
                self._container.wait(timeout=10)
            except Exception:
                pass

    def pause(self) -> None:
        """Freeze the component (cgroup freezer; its port still accepts connections), for fault tests."""
        if self._container is not None:
            self._container.pause()

    def unpause(self) -> None:
        if self._container is not None:
            self._container.unpause()

    @property
    def docker_container(self):
        """The docker-py Container while one exists (None before start and after stop)."""
        return self._container

    def _remove(self) -> None:
        tc, self._tc = self._tc, None
        container, self._container = self._container, None
        if tc is not None:
            try:
                tc.stop(force=True, delete_volume=True)  # docker rm -f -v, then closes its client
            except Exception:
                if container is not None:
                    try:
                        container.remove(force=True, v=True)
                    except Exception:
                        pass
        if self._follower is not None:
            self._follower.join(timeout=2)
            self._follower = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        _live.discard(self)

    # -- inspection ------------------------------------------------------------------------------
    def _state(self) -> dict:
        if self._container is None:
            return {}
        try:
            self._container.reload()
        except Exception:
            return {"Status": "removed"}
        return self._container.attrs.get("State", {})

    @property
    def container_name(self) -> str | None:
        return self._container.name if self._container is not None else None

    @property
    def pid(self) -> int | None:
        """The host pid of the container's init (what ps shows), or None."""
        return self._state().get("Pid") or None

    def returncode(self) -> int | None:
        """None while the container runs; its exit code once it has stopped."""
        if self._exit_code is not None:
            return self._exit_code
        state = self._state()
        if state.get("Status") in ("exited", "dead"):
            self._exit_code = int(state.get("ExitCode", -1))
        elif state.get("Status") == "removed":
            self._exit_code = -1
        return self._exit_code

    def is_running(self) -> bool:
        return self._container is not None and self._state().get("Status") in ("created", "running", "restarting")


_live: LiveSet[ManagedContainer] = LiveSet(grace_s=1.0)
stop_all = _live.stop_all


def live() -> list[ManagedContainer]:
    return _live.snapshot()


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "sweep":
        print("\n".join(sweep()))
        sys.exit(0)
    print("usage: python -m eppkit.components.container sweep", file=sys.stderr)
    sys.exit(2)
