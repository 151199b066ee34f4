"""The checks: each one function with one decorator (:func:`check`), registered in the registry of the subject it
judges, in the manner of GAIE's conformance tests.

A check judges one rule from Envoy's side (its access log, its ext_proc stats, what reached the backend, the trace),
never from the subject's word, and returns a :class:`~eppkit.conformance.results.Result`. Its decorator says all the
engine needs to know of it:

- its id, title, category, level and source (the report's);
- ``needs``: the ids of the checks whose failure leaves it not run (an EPP that breaks the reply order fails that
  check, not every check that sends a body); each must be declared before it;
- ``uses``: the resources it takes of the run (:data:`RESOURCES`), by which the scheduler
  (:mod:`eppkit.conformance.schedule`) places it, and by nothing else;
- ``declared``: for a rule only some subjects take on (they say so: the target's flags), why it does not apply.

Its rule is its docstring, the report's ``rule``: a template whose ``{NAME}`` fields are the constants of its module
(``{NAME:,}``, ``{NAME:g}``, ``{NAME[0]}``, ``{module.NAME}`` as str.format has them; ``{NAME!w}`` spells a number,
``{NAME!W}`` at a sentence's start, ``{NAME!t}`` says it as times, "twice"; ``{NAME!p}`` a share as "80 %";
``{NAME!b}`` bytes as "1.2 MB"), so that the text says the thresholds the code holds, from the one place that holds
them. A literal brace is doubled; a line that ends in a backslash (``\\``) goes on with the next one's first word.

The registry a check belongs to follows from where it is declared: a function of :mod:`eppkit.conformance.checks`
judges an EPP (:data:`CHECKS`), one of :mod:`eppkit.conformance.plugin_checks` a plugin (:data:`PLUGIN_CHECKS`); a
check of your own package says which (``subject="epp"`` or ``"plugin"``), there is no default.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from eppkit.conformance.results import MUST, PROTOCOL_DOC, Result
from eppkit.conformance.subject import EPP, KINDS, PLUGIN
from eppkit.core.registry import Registry

if TYPE_CHECKING:
    from eppkit.conformance.harness import Harness
    from eppkit.conformance.target import Target

# What a check takes of the run (its ``uses``). The scheduler places a check by these and its needs alone.
# Its rule has no HTTP in it, or it judges every client protocol in one run: run once, not once per protocol.
ONE_RUN = "one run"
# A testbed of its own (Harness.own): it runs in a thread of its own beside the checks after it, where the subject
# serves streams at once (a long check: the verdict waits for it once, at the first timed check or the end).
OWN_TESTBED = "own testbed"
# Its figures are times: nothing runs beside it (the checks on testbeds of their own are finished first), and its
# protocols run one after the other, never beside each other's requests, even where the subject serves streams at once.
TIMED = "timed"
# Its testbed's EPP watches a pool in a control plane (which a target's mode may otherwise not start): declared, the
# verdict starts the control plane at its beginning, beside the first checks.
CONTROL_PLANE = "control plane"
# The soak: long, left out with --quick (the verdict's headline then says so), and judged once per Envoy version
# matrix, on its first version (the rule is the subject's own, under load, not Envoy's).
SOAK = "soak"
# It reads what every request before it left (Envoy's counters, its log): it runs after every check that sends
# ordinary traffic.
AUDIT = "audit"
# Its requests may take the subject down (hostile input, clients that give up): it runs after every check whose
# requests may not, so that it takes no other check down with it.
MAY_TAKE_DOWN = "may take down"
RESOURCES = (ONE_RUN, OWN_TESTBED, TIMED, CONTROL_PLANE, SOAK, AUDIT, MAY_TAKE_DOWN)

# The checks whose pass means a request through the EPP is served at all (eppkit.conformance.checks.protocol's
# first): what most EPP checks need.
SERVED = ("reply-order", "streamed-body-mutations", "end-of-stream", "serves")


@dataclass(frozen=True)
class Check:
    name: str  # the check's id: stable, kebab-case (reports and pytest ids use it)
    title: str
    category: str
    level: str
    source: str
    order: int  # its place in its registry's listing (the report's order)
    run: Callable[[Harness], Result]
    needs: tuple[str, ...] = ()  # the checks whose failure leaves this one not run
    uses: frozenset[str] = frozenset()  # the resources it takes of the run (RESOURCES)
    # A rule only some subjects take on: (target) -> why it does not apply to this one, or None. The suite reports
    # n/a with that reason without running it; pytest makes no test of it.
    declared: Callable[[Any], str | None] | None = None

    def not_declared(self, target) -> str | None:
        """Why this check does not apply to ``target`` by what it declares, or None."""
        return self.declared(target) if self.declared is not None else None

    @property
    def doc(self) -> str:
        """Its rule: its docstring, the constants of its module filled in."""
        return rule_text(self.run)

    # What it uses, as the readers of a single resource ask it.
    @property
    def per_protocol(self) -> bool:
        return ONE_RUN not in self.uses

    @property
    def beside(self) -> bool:
        return OWN_TESTBED in self.uses

    @property
    def timed(self) -> bool:
        return TIMED in self.uses

    @property
    def control_plane(self) -> bool:
        return CONTROL_PLANE in self.uses

    @property
    def soak(self) -> bool:
        return SOAK in self.uses


CHECKS: Registry[Check] = Registry("conformance check")
# A plugin's checks (eppkit.conformance.plugin_checks): a registry of their own, so an EPP is never judged by a
# plugin's rules nor a plugin by an EPP's.
PLUGIN_CHECKS: Registry[Check] = Registry("plugin check")
REGISTRIES = {EPP: CHECKS, PLUGIN: PLUGIN_CHECKS}  # a subject's kind -> its checks
# Where a check is declared -> the kind of subject it judges.
HOMES = {"eppkit.conformance.checks": EPP, "eppkit.conformance.plugin_checks": PLUGIN}


def check(name: str, title: str, *, category: str, level: str = MUST, source: str = PROTOCOL_DOC,
          needs: tuple[str, ...] = (), uses: tuple[str, ...] = (), declared: Callable[[Any], str | None] | None = None,
          subject: str | None = None) -> Callable[[Callable[[Any], Result]], Callable[[Any], Result]]:
    """Register the decorated function (``harness -> Result``) as check ``name`` in the registry of the subject it
    judges: where it is declared says which (:data:`HOMES`), else ``subject``. ValueError at once for a check of
    no known subject (or of another than where it is declared), a need not declared before it, a resource the
    scheduler does not know, or a rule whose template names no constant of its module."""

    def register(fn: Callable[[Any], Result]) -> Callable[[Any], Result]:
        home = _home(fn.__module__)
        if home is not None and subject not in (None, home):
            raise ValueError(f"check {name!r} is declared among the {home} checks ({fn.__module__}), not "
                             f"subject={subject!r}")
        kind = home or subject
        if kind not in KINDS:
            raise ValueError(f"check {name!r} ({fn.__module__}): say which subject it judges, check(..., "
                             f"subject={' or '.join(map(repr, KINDS))}) (the kit's own say it by where they are: "
                             f"{', '.join(HOMES)})")
        registry = REGISTRIES[kind]
        unknown = sorted(set(uses) - set(RESOURCES))
        if unknown:
            raise ValueError(f"check {name!r} uses {', '.join(unknown)}: the scheduler knows {', '.join(RESOURCES)}")
        missing = [n for n in needs if n not in registry.names()]
        if missing:
            raise ValueError(f"check {name!r} needs {', '.join(missing)}, not declared before it as a {registry.kind}")
        rule_text(fn)  # a template that does not fill in fails here, not in the report
        registry.register(Check(name, title, category, level, source, len(registry.names()), fn, tuple(needs),
                                frozenset(uses), declared))
        return fn

    return register


def _home(module: str) -> str | None:
    return next((kind for home, kind in HOMES.items() if module == home or module.startswith(home + ".")), None)


def declared_by(says: Callable[[Target], bool], otherwise: str) -> Callable[[Target], str | None]:
    """A :attr:`Check.declared` for a rule an EPP takes on only when it says so (``says``: the target's flag, set by
    its option, e.g. ``lambda target: target.load_aware``): None for such a target, else ``otherwise``, why the rule
    does not apply."""
    return lambda target: None if says(target) else otherwise


# -- the rule text ------------------------------------------------------------------------------------------------
_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
         "seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def spelled(n: int) -> str:
    """``n`` (0 to 9,999) in words: 16 -> "sixteen", 2000 -> "two thousand", 45 -> "forty-five"."""
    if not 0 <= n < 10_000 or n != int(n):
        raise ValueError(f"{n!r}: a whole number under 10,000 is spelled")
    n = int(n)
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("-" + _ONES[n % 10] if n % 10 else "")
    for unit, word in ((1000, "thousand"), (100, "hundred")):
        if n >= unit:
            rest = n % unit
            return f"{_ONES[n // unit]} {word}" + (f" {'and ' if rest < 100 and unit == 100 else ''}{spelled(rest)}"
                                                   if rest else "")
    raise AssertionError(n)


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{spelled(n)} times")


def _bytes(n: int) -> str:
    for unit, name in ((1_000_000, "MB"), (1_000, "kB")):
        if n >= unit:
            return f"{n / unit:g} {name}"
    return f"{n} B"


_GOES_ON = re.compile(r"\\\n[ \t]*")  # a backslash at a line's end: the line goes on with the next one's first word


class _Rule(string.Formatter):
    """str.format with conversions of a rule's own: ``!w`` spells a number, ``!W`` with a capital, ``!t`` says it as
    times, ``!p`` a share as a percentage, ``!b`` bytes in decimal units."""

    SAID = {"w": spelled, "W": lambda n: spelled(n).capitalize(), "t": _times, "p": lambda share: f"{share * 100:g} %",
            "b": _bytes}

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if conversion in self.SAID:
            return self.SAID[conversion](value)
        return super().convert_field(value, conversion)


def rule_text(fn: Callable[..., Any]) -> str:
    """``fn``'s docstring with the constants of its module filled in (the module docstring says how)."""
    doc = _GOES_ON.sub("", (fn.__doc__ or "").strip())
    if "{" not in doc:
        return doc
    try:
        return _Rule().vformat(doc, (), getattr(fn, "__globals__", {}))
    except (KeyError, AttributeError, IndexError, ValueError) as exc:
        raise ValueError(f"the rule of {fn.__module__}.{fn.__qualname__} does not fill in ({type(exc).__name__}: "
                         f"{exc}): name a constant of its module, defined above the check, or double a literal "
                         "brace") from None
