"""The pd-pool flow: prefill and decode pods in one pool, as llm-d deploys them, each with its llm-d.ai/role; the
kit's picker reads the roles from its pool (#role) and never sends a request to a prefill-only pod; an EPP of your
own gets them as {pod_roles}."""

from __future__ import annotations

import asyncio
import json

import pytest

from eppkit import modes
from eppkit.components.ports import PortAllocator
from eppkit.modes import external_epp
from eppkit.services.picker.decision import PickError
from eppkit.services.picker.endpoints import format_endpoints, parse_endpoints
from eppkit.services.picker.request import parse_request
from eppkit.services.picker.settings import PickerSettings, create_picker
from eppkit.topology import Topology
from tests.support import kit

pytestmark = pytest.mark.unit


def arg(args, flag):
    return args[args.index(flag) + 1]


def test_the_pool_holds_the_prefill_pods_and_the_decode_pods_with_their_roles(tmp_path):
    plan = kit.plan_flow(Topology(mode="ext_proc", flow="pd-pool", prefill=1, decode=2), PortAllocator(), tmp_path)
    assert [(e.name, e.role) for e in plan.routable] == [("vllm-p0", "prefill"), ("vllm-d0", "decode"),
                                                         ("vllm-d1", "decode")]
    assert [e.name for e in plan.prefill] == ["vllm-p0"]
    sidecars = [s for s in plan.services if s.name.startswith("pd-sidecar")]
    assert [arg(s.args, "--prefill-endpoints") for s in sidecars] == [plan.prefill[0].address] * 2


def test_the_kit_s_epp_is_given_the_roles_and_the_prefill_pool(tmp_path):
    plan = kit.plan_flow(Topology(mode="ext_proc", flow="pd-pool"), PortAllocator(), tmp_path)
    mode_plan = modes.plan(Topology(mode="ext_proc", flow="pd-pool"), PortAllocator(), plan.routable, pools=plan)
    epp = next(s for s in mode_plan.services if s.name == "epp")
    endpoints = parse_endpoints(arg(epp.args, "--endpoints"))
    assert [(e.name, e.role) for e in endpoints] == [("vllm-p0", "prefill"), ("vllm-d0", "decode")]
    assert arg(epp.args, "--prefill-endpoints").startswith("vllm-p0=")


def test_an_epp_of_your_own_gets_each_pod_s_role(tmp_path):
    plan = kit.plan_flow(Topology(mode="ext_proc", flow="pd-pool"), PortAllocator(), tmp_path)
    argv = external_epp.epp_command("my-epp --roles {pod_roles}", {"grpc_port": 1}, plan.routable)
    assert argv[-1] == ",".join(f"{e.address}={e.role}" for e in plan.routable)
    assert argv[-1].split(",")[0].endswith("=prefill")


def test_the_pool_syntax_carries_a_role_and_refuses_one_llm_d_does_not_name():
    (ep,) = parse_endpoints("vllm-p0=127.0.0.1:1@m#prefill")
    assert (ep.name, ep.models, ep.role) == ("vllm-p0", ("m",), "prefill")
    assert format_endpoints([ep]) == "vllm-p0=127.0.0.1:1#prefill"
    assert parse_endpoints("127.0.0.1:1")[0].role == ""
    with pytest.raises(ValueError, match="llm-d.ai/role"):
        parse_endpoints("127.0.0.1:1#encode")


def request(subset=None):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = parse_request({}, body)
    req.subset = subset
    return req


def test_the_kit_s_picker_never_picks_a_prefill_only_pod():
    picker = create_picker(PickerSettings(scorer="round-robin", max_fallbacks=0),
                           "p=127.0.0.1:1#prefill,d0=127.0.0.1:2#decode,d1=127.0.0.1:3",
                           prefill="p=127.0.0.1:1#prefill")
    picks = [asyncio.run(picker.pick(request())) for _ in range(4)]
    assert {d.name for d in picks} == {"d0", "d1"}
    assert all(d.stages.prefiller.name == "p" for d in picks)
    with pytest.raises(PickError) as refused:
        asyncio.run(picker.pick(request(subset=["127.0.0.1:1"])))
    assert refused.value.status == 503 and "prefill-only" in refused.value.message


def test_the_kit_s_epp_started_as_an_epp_of_your_own_reads_the_roles_from_pod_roles():
    picker = create_picker(PickerSettings(scorer="round-robin", max_fallbacks=0), "p=127.0.0.1:1,d=127.0.0.1:2",
                           pod_roles="127.0.0.1:1=prefill,127.0.0.1:2=decode")
    assert {asyncio.run(picker.pick(request())).name for _ in range(3)} == {"d"}


def test_a_mode_where_nobody_picks_cannot_run_the_pd_pool_flow():
    with pytest.raises(ValueError, match="nobody picks"):
        modes.check(Topology(mode="direct", flow="pd-pool"))
    modes.check(Topology(mode="ext_proc", flow="pd-pool"))
