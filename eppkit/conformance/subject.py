"""What a verdict judges: its subject, an EPP (:class:`~eppkit.conformance.target.Target`) or a plugin
(:class:`~eppkit.conformance.target.PluginTarget`). :class:`Subject` is what the engine (the harness, the scheduler,
the suite, the report) uses of either; both targets implement it, and a unit test holds them to it. A check is typed
against the target of its registry (:data:`~eppkit.conformance.harness.EppHarness`,
:data:`~eppkit.conformance.harness.PluginHarness`): an EPP check reads what only an EPP says (``shed_header``, its
declarations), a plugin check what only a plugin says (``rewrites``, ``has_lua()``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from eppkit.topology import Topology

EPP, PLUGIN = "epp", "plugin"  # the kinds of subject: each has a registry of checks of its own
KINDS = (EPP, PLUGIN)


@runtime_checkable
class Subject(Protocol):
    kind: ClassVar[str]  # EPP or PLUGIN: the registry its checks come from, what the report says was judged
    mode: str  # the mode of integration its testbeds run
    options: dict[str, Any]
    filters: tuple  # your filters in the chain of every testbed
    pods: tuple[str, ...]
    envoy_version: str | None  # the Envoy that judges (None: the one installed with eppkit)
    test_header_options: dict[str, Any]  # what makes its testbed's EPP honour GAIE's test header

    @property
    def label(self) -> str:
        """What the report calls it."""

    def topology(self, **options: Any) -> Topology:
        """Its testbed, with ``options`` on top of its own."""

    def let_through_headers(self) -> dict[str, str]:
        """The headers every request of the verdict carries so that a plugin's gate lets it through."""

    def describe(self) -> dict[str, Any]:
        """The report's account of it."""

    def replace(self, **changes: Any) -> Any:
        """The same subject with ``changes`` (another Envoy version)."""

    def validate(self) -> Any:
        """Itself, or ValueError naming a bad option now, before any testbed starts."""


S = TypeVar("S", bound=Subject)  # the subject of a harness, a scheduler, a check
