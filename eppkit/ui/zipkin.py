"""Zipkin's server with its Lens UI: a live trace UI on loopback, fetched once from Maven Central.

Jaeger v2 as eppkit builds it (from its Go module) has no UI, and no package registry ships
Jaeger's. Zipkin's server does: one "exec" jar from Maven Central holds the server, an in-memory
store and the UI. It reads Zipkin v2 JSON, so :mod:`eppkit.ui.feed` copies Jaeger's traces
into it.

- The jar is fetched with Maven (``mvn dependency:copy``, the registry's own client, so a
  ``~/.m2/settings.xml`` mirror or proxy applies) into eppkit's cache, once.
- It runs with Java 17 or newer, in memory, on 127.0.0.1 only: Armeria binds every interface
  unless it is given IP, port *and* protocol together.
- JVM flags for a quick start on a small machine: C1 only and the serial collector halve the
  CPU time of a start; a 128 MiB heap keeps it at about 175 MiB resident.
- It is stopped with SIGKILL: its store is in memory, so nothing is lost, and a graceful stop
  takes 2.4 s (Netty's quiet period) where a kill takes milliseconds.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import requests

from eppkit.components.ports import PortAllocator
from eppkit.components.process import ManagedProcess
from eppkit.components.readiness import HttpReady
from eppkit.core.paths import cache_dir
from eppkit.core.progress import Progress
from eppkit.core.settings import Settings, settings

ZIPKIN_VERSION = "3.6.1"
ARTIFACT = f"io.zipkin:zipkin-server:{ZIPKIN_VERSION}:jar:exec"
JAR_NAME = f"zipkin-server-{ZIPKIN_VERSION}-exec.jar"
JAR_ENV = Settings.variable("zipkin_jar")  # use this jar instead of the cached one
MIN_JAVA = 17
# Everything optional is off: no gRPC collector, no self-tracing, no scribe, no actuator.
SERVER_ENV = {"STORAGE_TYPE": "mem", "MEM_MAX_SPANS": "500000", "COLLECTOR_GRPC_ENABLED": "false",
              "SELF_TRACING_ENABLED": "false", "SCRIBE_ENABLED": "false"}
JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx128m", "-Xss512k", "-Djava.net.preferIPv4Stack=true")



# -- the jar ----------------------------------------------------------------------------------------

def jar_path() -> Path:
    """Where the cached jar lives (whether it is there or not)."""
    return cache_dir() / "zipkin" / JAR_NAME


def find_jar() -> Path | None:
    """The server jar: $EPPKIT_ZIPKIN_JAR, else the cached one; None when neither exists."""
    path = settings().zipkin_jar or jar_path()
    return path if path.is_file() else None


def fetch(progress: Progress = print) -> Path:
    """The jar, fetched with ``mvn dependency:copy`` into the cache unless it is there already."""
    found = find_jar()
    if found is not None:
        progress(f"zipkin {ZIPKIN_VERSION}: cached at {found}")
        return found
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(f"Maven is needed to fetch Zipkin's server once ({ARTIFACT} from Maven Central): "
                           "apt-get install maven, or https://maven.apache.org/install.html")
    target = jar_path()
    staging = target.parent / "download"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    progress(f"zipkin {ZIPKIN_VERSION}: fetching {ARTIFACT} with Maven (about 130 MB) ...")
    started = time.monotonic()
    # Not --batch-mode: Maven reports transfer progress ("Progress (1): 12/135 MB") only without it.
    cmd = [mvn, "-Dstyle.color=never", "dependency:copy", f"-Dartifact={ARTIFACT}", f"-DoutputDirectory={staging}"]
    tail = _run_reporting(cmd, progress, started)
    fetched = staging / JAR_NAME
    if not fetched.is_file():
        raise RuntimeError(f"mvn dependency:copy did not produce {JAR_NAME}:\n" + "\n".join(tail))
    fetched.replace(target)
    shutil.rmtree(staging, ignore_errors=True)
    progress(f"zipkin {ZIPKIN_VERSION}: fetched in {time.monotonic() - started:.0f}s -> {target}")
    return target


def _run_reporting(cmd: list[str], progress: Progress, started: float, every_s: float = 3.0) -> list[str]:
    """Run Maven; pass its download lines on, its progress every few seconds; the last lines for errors."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            cwd=cache_dir())
    assert proc.stdout is not None
    tail: list[str] = []
    last, buffer = 0.0, b""
    while True:
        chunk = proc.stdout.read1(4096)
        if not chunk:
            break
        buffer += chunk
        # Progress lines end in a carriage return, the others in a newline.
        *lines, buffer = re.split(rb"[\r\n]", buffer)
        for raw in lines:
            line = raw.decode(errors="replace").strip()
            if not line:
                continue
            if line.startswith("Progress"):
                if time.monotonic() - last >= every_s:
                    last = time.monotonic()
                    progress(f"zipkin: {line.split(':', 1)[-1].strip()}, {time.monotonic() - started:.0f}s")
                continue
            tail = (tail + [line])[-40:]
            if line.startswith(("Downloading from", "Downloaded from")) and JAR_NAME in line:
                progress(f"zipkin: {line}")
    if proc.wait() != 0:
        raise RuntimeError(f"mvn dependency:copy failed (exit {proc.returncode}):\n" + "\n".join(tail))
    return tail


# -- Java -------------------------------------------------------------------------------------------

def find_java() -> tuple[Path | None, str]:
    """The ``java`` to run the server with and its version line; (None, why) when there is none usable."""
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home) / "bin" / "java" if home else None
    java = str(candidate) if candidate and candidate.is_file() else shutil.which("java")
    if java is None:
        return None, f"no java on PATH (Zipkin's server needs Java {MIN_JAVA}+: apt-get install openjdk-17-jre-headless)"
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{java} -version failed: {exc}"
    line = out.strip().splitlines()[0] if out.strip() else "unknown"
    major = java_major(line)
    if major is None or major < MIN_JAVA:
        return None, f"{java} is {line!r}; Zipkin's server needs Java {MIN_JAVA}+"
    return Path(java), line


def java_major(version_line: str) -> int | None:
    """17 from 'openjdk version "17.0.15" 2025-04-15'; 8 from the old '"1.8.0_392"' form."""
    m = re.search(r'version "(\d+)(?:\.(\d+))?', version_line)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


# -- the server -------------------------------------------------------------------------------------

class ZipkinServer:
    """Zipkin's server on 127.0.0.1 with in-memory storage; ``with`` or start()/wait_ready()/stop().

    :meth:`start` only spawns the JVM (about 3 s to ready on two cores), so a caller can start a
    testbed meanwhile and call :meth:`wait_ready` after.
    """

    def __init__(self, run_dir: Path, *, port: int | None = None, jar: Path | None = None):
        self.run_dir = Path(run_dir)
        self._ports = PortAllocator()  # its lease on the port lasts as long as this object
        self.port = port or self._ports.port()
        self.jar = jar or find_jar()
        self.process: ManagedProcess | None = None
        self.started_s = 0.0
        self.ready_after_s: float | None = None  # spawn to healthy, for the curious (and the docs' numbers)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"{self.url}/zipkin/"

    def trace_url(self, trace_id: str) -> str:
        """The UI page of one trace."""
        return f"{self.url}/zipkin/traces/{trace_id}"

    def argv(self, java: Path) -> list[str]:
        return [str(java), *JVM_FLAGS, "-jar", str(self.jar),
                # IP, port and protocol together; any one alone makes Armeria bind all interfaces or a random port.
                "--armeria.ports[0].ip=127.0.0.1", f"--armeria.ports[0].port={self.port}",
                "--armeria.ports[0].protocols=http",
                "--zipkin.internal.actuator.enabled=false", "--spring.main.banner-mode=off",
                "--logging.level.root=WARN", "--logging.level.com.linecorp.armeria.server.Server=INFO"]

    def start(self) -> "ZipkinServer":
        if self.jar is None:
            raise FileNotFoundError(f"Zipkin's server jar is not cached. Run `eppkit bootstrap --ui` (fetches "
                                    f"{ARTIFACT} with Maven) or set ${JAR_ENV}.")
        java, why = find_java()
        if java is None:
            raise FileNotFoundError(why)
        self.process = ManagedProcess("zipkin", self.argv(java), self.run_dir / "zipkin.log").with_env(**SERVER_ENV)
        self.started_s = time.monotonic()
        self.process.start()
        return self

    def wait_ready(self, timeout_s: float = 90.0) -> "ZipkinServer":
        assert self.process is not None, "start() first"
        self.process.wait_ready(HttpReady(f"{self.url}/health", body_contains="UP", timeout_s=timeout_s,
                                          poll_interval_s=0.1),
                                hint="Zipkin's server did not come up; its log is above (Java 17+ and the jar?)")
        self.ready_after_s = time.monotonic() - self.started_s
        return self

    def stop(self) -> None:
        # SIGKILL at once (grace 0): in-memory storage has nothing to flush.
        if self.process is not None:
            self.process.stop(grace_s=0)

    def __enter__(self) -> "ZipkinServer":
        return self.start().wait_ready()

    def __exit__(self, *exc) -> None:
        self.stop()


class RunningZipkin(ZipkinServer):
    """A Zipkin server that another process started and will stop (the pytest-xdist controller's, which
    every worker's :class:`~eppkit.ui.live.LiveUI` feeds): start and stop leave it alone."""

    def __init__(self, url: str):
        self.port = int(url.rstrip("/").rsplit(":", 1)[1])
        self.process = None
        self.started_s = time.monotonic()
        self.ready_after_s = None

    def start(self) -> "RunningZipkin":
        return self

    def wait_ready(self, timeout_s: float = 90.0) -> "RunningZipkin":
        from eppkit.core.polling import poll

        poll(lambda: requests.get(f"{self.url}/health", timeout=2).text, until=lambda body: "UP" in body,
             timeout_s=timeout_s, interval_s=0.2, retry_on=(requests.RequestException,),
             describe=f"the run's Zipkin at {self.url} to be healthy")
        return self

    def stop(self) -> None:
        pass

