"""What every rendered Envoy bootstrap does against hostile clients (rendered, not run; the e2e tests
tests/e2e/test_hostile_*.py drive the real Envoy):

- internal routing headers a client sends are removed before any filter sees them;
- every reply Envoy makes itself is OpenAI-style JSON, replies that are JSON already are left alone;
- slow or short clients are bounded by configurable timeouts;
- with ext_proc also on the response path, replies made by the HTTP/1 codec skip the EPP.
"""

import re

import pytest
import yaml
from eppkit.services.pd_sidecar import server as pd_sidecar
from eppkit.services.picker import headers

from eppkit import modes
from eppkit.components.ports import PortAllocator
from eppkit.gateway import config as envoy_config
from eppkit.modes import plan
from eppkit.modes.options import CommonOptions
from eppkit.plan import Endpoint
from eppkit.topology import Topology
from tests.support import kit

pytestmark = pytest.mark.unit

BACKENDS = [Endpoint("vllm-0", "127.0.0.1", 18001)]
BASE_VARS = {"admin_port": 1, "listen_port": 2, "jaeger_otlp_grpc_port": 3, "backends": BACKENDS}
MODES = ["direct", "ext_proc", "sidecar", "lua-callout"]  # dynmod-callout's plan builds the module; same base


def render(mode: str, flow: str = "aggregated", **options) -> dict:
    topology = Topology(mode=mode, flow=flow, options=options)
    p = plan(topology, PortAllocator(), BACKENDS)
    variables = {**BASE_VARS, "flow": flow, **envoy_config.client_timeouts(modes.options_for(topology)), **p.envoy_vars}
    return yaml.safe_load(kit.render(mode, variables))


def hcm(config: dict) -> dict:
    return config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]


def stripped(config: dict, header: str) -> bool:
    (extension,) = hcm(config)["early_header_mutation_extensions"]
    for mutation in extension["typed_config"]["mutations"]:
        if mutation.get("remove") == header:
            return True
        matcher = mutation.get("remove_on_match", {}).get("key_matcher", {})
        if matcher.get("prefix") and header.startswith(matcher["prefix"]):
            return True
        if matcher.get("safe_regex") and re.fullmatch(matcher["safe_regex"]["regex"], header):
            return True
    return False


INTERNAL = sorted({
    headers.DESTINATION, headers.WORKER_ID, headers.MODEL, headers.PREFILLER, headers.ENCODERS,
    headers.ROUTING_REQUEST, pd_sidecar.HEADER_PREFILLER, pd_sidecar.HEADER_ENCODERS,
    "x-gateway-destination-endpoint-served", "x-envoy-original-dst-host",
})


@pytest.mark.parametrize("mode", MODES)
def test_every_internal_routing_header_is_removed_before_any_filter(mode):
    config = render(mode)
    missing = [h for h in INTERNAL if not stripped(config, h)]
    assert not missing, f"{mode}: a client's {missing} would reach the filters and the backends"
    # Test steering stays: the e2e tests force picks with it on purpose.
    assert not stripped(config, "x-eppkit-force-endpoint")
    # GAIE's objective header is the client's to set: the EPP reads the request's priority from it.
    assert not stripped(config, headers.OBJECTIVE)


@pytest.mark.parametrize("mode", MODES)
def test_one_local_reply_mapper_turns_every_non_json_error_into_openai_json(mode):
    (mapper,) = hcm(render(mode))["local_reply_config"]["mappers"]
    expression = mapper["filter"]["extension_filter"]["typed_config"]["expression"]
    # Keyed on the reply's own content type: a picker's JSON reply (Lua respond, ext_proc immediate
    # response, the dynamic module, a JSON direct_response) keeps its body whoever made it.
    assert "response.code >= 400" in expression and "application/json" in expression
    body = mapper["body_format_override"]
    assert body["content_type"] == "application/json"
    assert set(body["json_format"]["error"]) == {"message", "type", "param", "code"}


def test_client_timeouts_default_and_follow_the_topology_options():
    assert envoy_config.client_timeouts(CommonOptions()) == {"request_headers_timeout_s": 10.0, "request_timeout_s": 60.0}
    default = hcm(render("direct"))
    assert (default["request_headers_timeout"], default["request_timeout"]) == ("10.000s", "60.000s")
    assert default["stream_idle_timeout"] == "300s"
    short = hcm(render("ext_proc", request_timeout_s=2, request_headers_timeout_s=0.5))
    assert (short["request_headers_timeout"], short["request_timeout"]) == ("0.500s", "2.000s")
    off = hcm(render("direct", request_timeout_s=0))
    assert off["request_timeout"] == "0.000s"


def test_a_template_rendered_without_the_timeout_variables_gets_the_defaults():
    p = plan(Topology(), PortAllocator(), BACKENDS)
    config = yaml.safe_load(kit.render("direct", {**BASE_VARS, "flow": "aggregated", **p.envoy_vars}))
    assert hcm(config)["request_timeout"] == "60.000s"


def ext_proc_filter(config: dict) -> dict:
    (f,) = [f for f in hcm(config)["http_filters"] if f["name"] == "envoy.filters.http.ext_proc"]
    return f["typed_config"]


@pytest.mark.parametrize("flow, options", [("multipart", {}), ("aggregated", {"epp_process_response": True})])
def test_ext_proc_on_the_response_path_skips_replies_made_by_the_http1_codec(flow, options):
    wrapper = ext_proc_filter(render("ext_proc", flow, **options))
    assert wrapper["@type"].endswith("ExtensionWithMatcher")
    inner = wrapper["extension_config"]["typed_config"]
    assert inner["@type"].endswith("ExternalProcessor")
    assert inner["processing_mode"]["response_header_mode"] == "SEND"
    (matcher,) = wrapper["xds_matcher"]["matcher_list"]["matchers"]
    assert matcher["on_match"]["action"]["typed_config"]["@type"].endswith("SkipFilter")
    text = yaml.safe_dump(matcher["predicate"])
    assert "code_details" in text and "http1." in text


def test_ext_proc_without_response_processing_is_the_plain_filter():
    config = ext_proc_filter(render("ext_proc"))
    assert config["@type"].endswith("ExternalProcessor")
    assert config["processing_mode"]["response_header_mode"] == "SKIP"
