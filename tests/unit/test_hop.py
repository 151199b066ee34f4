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


# Envoy's own log line (stderr) that landed inside an access-log record (stdout, the same file on the local runtime),
# between the two writes of a record that spanned two buffer slices: as CI's fail-open check found it (1.40.0).
WARNING = ('[2026-12-07 06:25:58.608][12612][warning][ext_proc] [source/extensions/filters/http/ext_proc/ext_proc.cc:'
           '2068] [Tags: "ConnectionId":"19","StreamId":"2631831639258774565"] Received gRPC error on stream: 14, '
           'message no healthy upstream{no_healthy_upstream}')


def test_a_record_cut_in_two_by_envoys_own_log_line_is_read_whole(tmp_path):
    cut = LINE.index('"ext_proc"') + 30
    lines = [LINE.replace("r1", "r0"), LINE[:cut] + WARNING, WARNING, LINE[cut:], "[access] a human line", LINE]
    found = hop.read(lines)
    assert [h["request_id"] for h in found] == ["r0", "r1", "r1"], found
    assert found[1].call_statuses() == hop.parse(LINE).call_statuses()
    # read as the log grows: the tail written after the head was read
    log = tmp_path / "envoy.log"
    log.write_text("\n".join(lines[:2]) + "\n")
    index = hop.LogIndex(log)
    assert index.find("0af7651916cd43dd8448eb211c80319c").fields["request_id"] == "r0"
    with open(log, "a") as f:
        f.write("\n".join(lines[2:4]) + "\n")
    assert index.find("0af7651916cd43dd8448eb211c80319c").fields["request_id"] == "r1"
    assert [h["request_id"] for h in index.update().hops] == ["r0", "r1"]
