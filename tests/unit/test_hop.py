"""Envoy's record of one request (eppkit.gateway.hop): its access-log line read into phases."""

import json

import pytest

from eppkit.gateway import hop

pytestmark = pytest.mark.unit

# A real line (Envoy 1.40.0, the kit's EPP, a small chat request), as envoy/base.yaml.j2 writes it.
LINE = json.dumps({
    "eppkit_hop": 1, "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "request_id": "r1", "method": "POST", "path": "/v1/chat/completions", "code": 200, "flags": "-",
    "details": "via_upstream", "route": "picked", "upstream": "127.0.0.1:18001", "attempts": 1,
    "destination": "127.0.0.1:18001,127.0.0.1:18002", "destination_header": "127.0.0.1:18001,127.0.0.1:18002",
    "served": "127.0.0.1:18001", "body_bytes": 107, "request_end_us": 2519, "upstream_start_us": 8215,
    "upstream_sent_us": 8220, "upstream_first_byte_us": 21773, "upstream_end_us": 22011,
    "response_start_us": 21973, "response_end_us": 22073,
    "ext_proc": {"request_header_latency_us": 4526, "request_header_call_status": 0,
                 "request_body_max_latency_us": 5543, "request_body_last_call_status": 0,
                 "request_body_call_count": 1, "bytes_sent": 525},
})


def test_a_hop_line_reads_into_its_phases_in_ms():
    (found,) = hop.read(["[2026-11-24 14:00:00.000][1][warning][main] not a hop", LINE, "{not json"])
    assert found.trace_id == "0af7651916cd43dd8448eb211c80319c" and found.code == 200
    assert found.phases() == {"upload": 2.519, "hold": 5.696, "epp_decision": 4.526, "epp_release": 5.543,
                              "upstream": 13.558, "response": 0.1}
    assert found.call_statuses() == {"request_header_call_status": 0, "request_body_last_call_status": 0}
    assert "route=picked" in found.describe()


def test_a_request_envoy_answered_itself_has_only_the_phases_it_reached():
    line = json.loads(LINE)
    line.update(code=500, details="spurious_message", upstream_start_us=None, upstream_first_byte_us=None,
                ext_proc={"request_header_latency_us": 1200, "request_header_call_status": 9})
    found = hop.parse(json.dumps(line))
    assert set(found.phases()) == {"upload", "epp_decision", "response"}
    assert found.call_statuses() == {"request_header_call_status": 9}


def test_modes_without_ext_proc_have_no_epp_phases():
    line = json.loads(LINE)
    line["ext_proc"] = None
    found = hop.parse(json.dumps(line))
    assert found.ext_proc == {} and not any(p.startswith("epp_") for p in found.phases())
