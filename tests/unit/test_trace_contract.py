"""The trace contract (observability/contract.py) against what the kit's parts really emit and document.

- every name a producer passes to start_span / start_as_current_span / add_event / set_attribute(s)
  is a contract constant, never a string literal (an AST scan of the producers);
- the Go dynamic module's span name and tags are the contract's;
- Envoy's cluster names in span names are the templates' ones;
- docs/CONTRACTS.md's trace tables are what ``contract_check.markdown()`` makes;
- real saved traces (every mode, aggregated/pd/epd) conform.
Spans recorded in memory by the unit tests are checked too (tests/unit/conftest.py).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from eppkit.observability import contract as c
from eppkit.observability import contract_check as check
from eppkit.observability.contract import Cluster, Dynmod, Envoy, Epp, Vllm

from eppkit import TraceAssertionError, TraceCheck

ROOT = Path(__file__).resolve().parents[2]

# Every module that may create spans. (The pickers, epp, callout and frontend, were the last to move.)
NOT_YET_ON_THE_CONTRACT: tuple[str, ...] = ()
PRODUCERS = sorted(p for p in [*(ROOT / "services").rglob("*.py"), *(ROOT / "observability").glob("*.py"),
                               ROOT / "tests" / "support" / "reliability.py"]
                   if not str(p.relative_to(ROOT)).startswith(NOT_YET_ON_THE_CONTRACT)
                   and p.name != "contract.py")
SPAN_CALLS = {"start_span", "start_as_current_span", "add_event", "set_attribute", "set_attributes", "_child",
              "setup_tracing"}


def _literal_names(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line text`` of every span/event/attribute name written as a string literal."""
    out = []

    def literal(node) -> bool:
        return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))

    def dict_keys(node) -> list:
        return [k for k in node.keys if k is not None and literal(k)] if isinstance(node, ast.Dict) else []

    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "attrs" \
                and literal(node.slice):
            out.append(node.slice)  # attrs["..."] = ... built for set_attributes
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in SPAN_CALLS):
            continue
        args = list(node.args)
        name = args[1] if node.func.attr == "_child" and len(args) > 1 else (args[0] if args else None)
        if name is not None and literal(name):
            out.append(name)
        for arg in args:
            out += dict_keys(arg)
        for kw in node.keywords:
            if kw.arg == "attributes":
                out += dict_keys(kw.value)
        # a dict literal assigned to a name that is then passed (attrs = {...}; span.set_attributes(attrs))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "attrs" for t in node.targets):
            out += dict_keys(node.value)
    return [f"{path.relative_to(root)}:{n.lineno} {ast.unparse(n)}" for n in out]


def test_producers_name_spans_and_attributes_through_the_contract():
    found = [hit for path in PRODUCERS for hit in _literal_names(path)]
    assert not found, "names written as literals instead of contract constants:\n" + "\n".join(found)


def test_the_scan_finds_literals(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('span = tracer.start_span("x.y", attributes={"a.b": 1})\nspan.set_attribute(f"k.{n}", 2)\n'
                      'span.add_event(Vllm.STALL_STARTED, {"c": 1})\nattrs = {"d": 1}\nattrs["e"] = 2\n'
                      'self._child(span, "vllm.queue")\n')
    hits = [line.split(" ", 1)[1] for line in _literal_names(sample, tmp_path)]
    assert sorted(hits) == sorted(["'x.y'", "'a.b'", "f'k.{n}'", "'c'", "'d'", "'e'", "'vllm.queue'"])


def test_the_go_module_uses_the_contracts_span_name_and_tags():
    source = (ROOT / "plugins" / "dynamic_module" / "internal" / "callout" / "filter.go").read_text()
    (span_name,) = re.findall(r'^const SpanName = "([^"]+)"', source, re.M)
    assert span_name == Dynmod.CALLOUT
    tags = set(re.findall(r'SetTag\("([^"]+)"', source))
    assert tags, "no SetTag in filter.go: has the module's span moved?"
    assert tags <= set(c.span(Dynmod.CALLOUT).attributes), tags - set(c.span(Dynmod.CALLOUT).attributes)


def test_envoy_cluster_names_in_span_names_are_the_templates_ones():
    ext_proc = (ROOT / "envoy" / "ext_proc.yaml.j2").read_text()
    callouts = (ROOT / "envoy" / "_callout.j2").read_text()  # both callout modes' routes and clusters
    assert re.search(rf"^  - name: {Cluster.CALLOUT}$", callouts, re.M)
    # Every picker mode's picked route and cluster (one name, so one upstream span name).
    picked = (ROOT / "envoy" / "_picked.j2").read_text()
    assert re.search(rf"^  - name: {Cluster.PICKED}$", picked, re.M)
    assert all('{% import "_picked.j2" as picked with context %}' in t for t in (ext_proc, callouts))
    assert f'"cluster": "{Cluster.POOL}"' in (ROOT / "eppkit" / "gateway" / "body_routing.py").read_text()
    assert Envoy.router(Cluster.PICKED) == "router picked egress"
    assert c.span(Envoy.router("pool_mock-llm")).name == Envoy.ROUTER


def test_contracts_md_holds_the_generated_tables():
    doc = ROOT / "docs" / "CONTRACTS.md"
    text = doc.read_text()
    assert check.render_into(text) == text, (
        "docs/CONTRACTS.md is out of date: python -m eppkit.observability.contract_check --write docs/CONTRACTS.md")


def test_every_span_attribute_and_event_a_span_lists_is_declared():
    attributes, events = c.entries(c.ATTRIBUTE), c.entries(c.EVENT)
    for entry in c.entries(c.SPAN).values():
        assert entry.service in c.entries(c.SERVICE), entry
        assert set(entry.attributes) <= set(attributes), (entry.name, set(entry.attributes) - set(attributes))
        assert set(entry.events) <= set(events), (entry.name, set(entry.events) - set(events))
    for entry in events.values():
        assert set(entry.attributes) <= set(attributes), entry


def test_violations_name_what_is_not_declared():
    assert check.violations(Epp.PICK, [Epp.ENDPOINT], service="epp") == []
    assert check.violations("epp.guess") == ["span 'epp.guess' is not declared"]
    assert check.violations(Epp.PICK, ["epp.colour"], {Vllm.STALL_STARTED: []}, service="vllm") == [
        "span 'vllm:epp.pick' comes from 'vllm', declared for 'epp'",
        "span 'vllm:epp.pick': attribute 'epp.colour' is not declared for it",
        "span 'vllm:epp.pick': event 'stall_started' is not declared for it",
    ]
    # Envoy's spans carry Envoy's own tags too: checked by name only
    assert check.violations(Envoy.router("pool"), ["component", "peer.address"], service="envoy") == []


def test_a_trace_that_breaks_the_contract_fails_the_check():
    from eppkit.observability.trace_model import Span, Trace

    trace = Trace("t", [Span("a", "t", Vllm.DECODE, c.Service.VLLM, 0, 5, attributes={"vllm.colour": "red"})])
    with pytest.raises(TraceAssertionError, match="attribute 'vllm.colour' is not declared"):
        TraceCheck(trace).follows_contract()


def test_service_of_names_the_emitter_or_lists_what_is_declared():
    assert c.service_of(Vllm.DECODE) == c.Service.VLLM
    assert c.service_of("router pool egress") == c.Service.ENVOY
    with pytest.raises(KeyError, match="not in the trace contract"):
        c.service_of("vllm.guess")


def test_a_name_is_declared_once():
    keys = [(e.kind, e.name) for e in c.ENTRIES]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("path", sorted((ROOT / "tests" / "unit" / "data" / "traces").glob("*.json")),
                         ids=lambda p: p.stem)
def test_real_traces_follow_the_contract(path):
    from eppkit.compare.report import load_trace

    trace = load_trace(path)
    TraceCheck(trace).follows_contract()
    assert trace.services() <= set(c.entries(c.SERVICE))
