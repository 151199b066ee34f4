"""A hostile client in the disaggregated flows: it cannot make the pd-sidecar call an address of its
choosing, and bad media items are a 400 naming the item.

| case | expected |
|---|---|
| ``x-prefiller-host-port: 127.0.0.1:<Envoy admin>/quitquitquit?x=`` through Envoy | Envoy drops the header: a configured prefiller serves, Envoy stays up |
| ``x-prefiller-host-port`` / ``x-encoder-hosts-ports`` naming Jaeger's query port, through Envoy | dropped the same way |
| the same headers sent to the pd-sidecar directly (inside the network) | 400 JSON naming the header; nothing is called |
| ``image_url`` that is garbage base64, not a string, or not a URL / data URL (epd) | 400 JSON naming the media item |

Run in every mode with the epd flow (prefillers and encoders), and in direct mode with pd and ttft.
"""

from urllib.parse import urlparse

import pytest
import requests

from tests.support.reliability import MODES, assert_kit_healthy, assert_openai_error, chat_body, topology

# Under pytest-xdist each (mode, flow)'s shared testbed is a group of its own.
pytestmark = [pytest.mark.e2e, pytest.mark.eppkit_share_per("mode", "flow")]

PREFILLER = "x-prefiller-host-port"
ENCODERS = "x-encoder-hosts-ports"
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "aW1n" * 20}}

TARGETS = [(mode, "epd") for mode in MODES] + [("direct", "pd"), ("direct", "ttft")]
IDS = [f"{m}-{f}" for m, f in TARGETS]


def with_image(flow: str) -> list | str:
    return [{"type": "text", "text": "What is in it?"}, IMAGE] if flow == "epd" else "Which pod am I on?"


def jaeger_alive(bed) -> bool:
    return requests.get(bed.jaeger_api_url + "/api/services", timeout=5).status_code == 200


def hostile_headers(bed) -> list[dict[str, str]]:
    jaeger = urlparse(bed.jaeger_api_url).netloc
    admin = f"127.0.0.1:{bed.admin_port}"
    return [
        {PREFILLER: f"{admin}/quitquitquit?x=", ENCODERS: f"{admin}/quitquitquit?x="},
        {PREFILLER: jaeger, ENCODERS: jaeger},
        {PREFILLER: f"{jaeger}/api/services?x=", ENCODERS: f"http://{jaeger}/"},
    ]


@pytest.mark.parametrize("mode, flow", TARGETS, ids=IDS)
def test_a_client_cannot_choose_the_prefiller_or_encoders(eppkit_shared_testbed_factory, mode, flow):
    bed = eppkit_shared_testbed_factory(topology(mode, flow=flow))
    prefillers = {ep.address for ep in bed.layout.prefill}
    client = bed.client()
    for headers in hostile_headers(bed):
        result = client.chat(chat_body(with_image(flow), stream=True), headers=headers, timeout_s=30)
        assert result.status == 200 and result.tokens, (headers, result.status, result.body, result.error)
        assert result.headers.get("x-pd-prefiller") in prefillers, (headers, result.headers)
        assert not any("error" in e for e in result.events), result.events
    client.flush()
    assert_kit_healthy(bed)
    assert jaeger_alive(bed)


@pytest.mark.parametrize("mode, flow", TARGETS, ids=IDS)
def test_the_pd_sidecar_refuses_a_destination_outside_its_lists(eppkit_shared_testbed_factory, mode, flow):
    """Behind Envoy's strip, the sidecar's own allowlist: what llm-d's routing sidecar does too."""
    bed = eppkit_shared_testbed_factory(topology(mode, flow=flow))
    sidecar = bed.services["pd-sidecar-0"].url
    for headers in hostile_headers(bed):
        for name, value in headers.items():
            if name == ENCODERS and flow != "epd":
                continue
            resp = requests.post(sidecar + "/v1/chat/completions", json=chat_body(with_image(flow)),
                                 headers={name: value}, timeout=30)
            assert resp.headers.get("content-type", "").startswith("application/json"), (name, value, resp.text[:300])
            assert_openai_error(resp.status_code, resp.json(), 400, mentions=name)
    assert_kit_healthy(bed)
    assert jaeger_alive(bed)


BAD_IMAGES = [
    ("garbage-base64", {"url": "data:image/png;base64,@@@ this is not base64 @@@"}, "base64"),
    ("not-a-string", 12345, "string"),
    ("url-not-a-string", {"url": 12345}, "string"),
    ("not-a-url", {"url": "just some words"}, "URL"),
]


@pytest.mark.parametrize("mode", MODES)
def test_a_bad_image_url_is_a_400_naming_the_item(eppkit_shared_testbed_factory, mode):
    bed = eppkit_shared_testbed_factory(topology(mode, flow="epd"))
    client = bed.client()
    problems = []
    for case_id, image_url, why in BAD_IMAGES:
        content = [{"type": "text", "text": "What is in these?"}, IMAGE, {"type": "image_url", "image_url": image_url}]
        result = client.chat(chat_body(content), timeout_s=30)
        try:
            assert result.error is None, result.error
            assert_openai_error(result.status, result.body, 400, mentions="media item 1 (image_url)")
            assert why in result.body["error"]["message"], result.body
        except AssertionError as exc:
            problems.append(f"{case_id}: {exc}")
    client.flush()
    assert not problems, f"{mode}:\n" + "\n".join(problems)
    assert_kit_healthy(bed)
    good = client.chat(chat_body(with_image("epd")))
    assert good.status == 200, good.body
