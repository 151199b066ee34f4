"""A changed body is shown, not hashed (eppkit.conformance.bodydiff): where it first differs, and whether the JSON
still says the same — every key, duplicate and exact number — or which values a re-encoder lost; a body cut short
is data lost, said with the bytes that arrived of it, never a re-encoding nor a check not run."""

from __future__ import annotations

import base64
import hashlib
import json
from types import SimpleNamespace

import pytest
from eppkit.observability.client import ClientResult
from eppkit.services.openai_errors import error_body
from eppkit.services.pod_headers import HEADER_BODY_BYTES, HEADER_BODY_SHA256, HEADER_POD, RECEIVED_BODY_FIELD

from eppkit.conformance.bodydiff import LOST, REENCODED, SAME, UNREAD, arrival, first_difference, json_kept
from eppkit.conformance.checks._bodies import body as _body
from eppkit.conformance.checks.protocol import bodies_byte_for_byte, body_values_kept
from eppkit.conformance.checks.registry import FAIL, PASS
from eppkit.conformance.harness import Harness
from eppkit.conformance.witness import NotWitnessed, Sent

pytestmark = pytest.mark.unit

SENT = _body(200, "mock-llm")


def test_the_first_difference_is_named_with_its_offset_and_context():
    got = SENT.replace(b"caf\xc3\xa9", b"cafe")
    said = first_difference(SENT, got)
    assert said.startswith(f"first difference at byte {SENT.index(b'caf') + 3:,} (sent {len(SENT)} B, received ")
    assert "caf\\xc3\\xa9" in said and "cafe" in said, said
    assert first_difference(SENT, SENT) == "the same bytes"
    assert "received 10 B" in first_difference(SENT, SENT[:10])


def test_a_reencoding_that_keeps_every_value_is_the_same_json():
    # keys in another order, no spacing, the escapes written out and the non-ASCII escaped: the same values
    compact = ('{"temperature":0.12345678901234567,"max_tokens":2,"max_tokens":1,"model":"mock-llm",'
               '"messages":[{"content":' + json.dumps(json.loads(SENT)["messages"][0]["content"]) + ',"role":"user"}],'
               '"seed":9007199254740993}')
    kept, how = json_kept(SENT, compact.encode())
    assert kept is True and "only the bytes" in how, how


def test_a_reencoder_that_reads_numbers_as_float64_and_keeps_one_duplicate_loses_values():
    decoded = json.loads(SENT)
    decoded["seed"] = float(decoded["seed"])  # as Go's encoding/json into interface{} reads it
    kept, how = json_kept(SENT, json.dumps(decoded).encode())
    assert kept is False, how
    assert "$.seed was 9007199254740993, arrived 9007199254740992" in how, how
    assert "$.max_tokens was 2 values: 1, 2, arrived 1" in how, how


def test_a_body_that_is_not_json_any_more_says_so():
    assert json_kept(SENT, SENT[:-1])[0] is False and "not JSON any more" in json_kept(SENT, SENT[:-1])[1]
    assert json_kept(b"not json", b"x") == (None, "the client's body is not JSON")


def test_the_echo_epps_two_body_faults_are_one_of_each_level():
    # change-body re-encodes keeping every value (bodies-byte-for-byte, a should); reencode-json reads the body into
    # float64s and a map as Go's json.Marshal does, GAIE's EPP v1.5.0 among them (body-values-kept, a must)
    from eppkit.services.echo_epp.server import reencoded

    assert json_kept(SENT, SENT.replace(b" ", b"", 1))[0] is True
    kept, how = json_kept(SENT, reencoded(SENT))
    assert kept is False, how
    assert "$.seed was 9007199254740993, arrived 9007199254740992" in how, how
    assert "$.temperature was 0.12345678901234567, arrived 0.12345678901234566" in how, how
    assert reencoded(b"not json") == b"not json"


def test_the_body_checks_split_by_level_the_should_after_the_must():
    from eppkit.conformance.checks import CHECKS

    values, bytes_ = CHECKS.get("body-values-kept"), CHECKS.get("bodies-byte-for-byte")
    assert (values.level, bytes_.level) == ("must", "should")
    assert "body-values-kept" in bytes_.needs and values.order < bytes_.order


# -- what became of a body that arrived as other bytes (bodydiff.arrival), and the checks' words for it ---------------

CUT = 65_536
LARGE = _body(1_200_000, "mock-llm")


def test_arrival_of_a_body_cut_short_is_lost_with_its_counts_never_a_reencoding():
    found = arrival(LARGE, LARGE[:CUT], got_bytes=CUT, status=400)
    assert found.kind == LOST, found
    assert found.counts == "65,536 of 1,200,000 bytes arrived"
    assert found.how.startswith("values lost: what arrived is not JSON any more"), found.how
    assert found.how.endswith("the backend answered HTTP 400"), found.how
    assert found.where.startswith("first difference at byte 65,536, where what arrived ends"), found.where
    assert "re-encod" not in found.how


def test_arrival_without_the_backends_copy_is_lost_when_its_length_changed_or_it_was_refused():
    by_length = arrival(LARGE, None, got_bytes=CUT, status=200)
    assert (by_length.kind, by_length.counts) == (LOST, "65,536 of 1,200,000 bytes arrived"), by_length
    assert "no value can be shown kept" in by_length.how
    refused = arrival(SENT, None, got_bytes=len(SENT), status=400, said="Invalid JSON in request body")
    assert refused.kind == LOST and "the backend answered HTTP 400 (Invalid JSON in request body)" in refused.how
    # the same length, served: nothing says a value was lost, nothing shows it kept
    assert arrival(SENT, None, got_bytes=len(SENT), status=200).kind == UNREAD
    assert arrival(SENT, None, got_bytes=None, status=200).kind == UNREAD


def test_arrival_of_the_same_values_in_other_bytes_is_a_reencoding():
    found = arrival(SENT, SENT.replace(b" ", b"", 1), got_bytes=len(SENT) - 1)
    assert (found.kind, found.counts) == (REENCODED, f"{len(SENT) - 1} of {len(SENT)} bytes arrived"), found
    assert arrival(SENT, SENT).kind == SAME
    grown = arrival(b"", b"{}", got_bytes=2)
    assert (grown.kind, grown.counts) == (LOST, "2 bytes arrived for the 0 sent"), grown


class _Bed:
    backends = [SimpleNamespace(model="mock-llm")]


class _BodiesThrough:
    """The harness as the body checks use it, in front of a backend that receives ``deliver(body)`` of each body and
    answers as the kit's mock does: 200 to JSON it reads, else 400 with its OpenAI-style error; its length, digest
    and (asked) its copy of what it received on either."""

    protocol = "http/1.1"
    body_digest, body_length = staticmethod(Harness.body_digest), staticmethod(Harness.body_length)
    digest, served_by = staticmethod(Harness.digest), staticmethod(Harness.served_by)
    must_serve, cause, request_timeout_s = Harness.must_serve, Harness.cause, 4.0

    def __init__(self, deliver):
        self.deliver = deliver

    def bed(self):
        return _Bed()

    def send_all(self, bed, requests):
        return [self._send(r["raw_body"]) for r in requests]

    def _send(self, data):
        got = self.deliver(data)
        if got is None:  # no answer in time: the client gave up, Envoy logged no line yet
            return Sent(ClientResult(trace_id="t", status=0, headers={}, body=None,
                                     error="ReadTimeout: read timeout=4.0"), None, self.protocol)
        try:
            json.loads(got)
            status, body = 200, {"choices": []}
        except ValueError:
            status, body = 400, error_body(400, "Invalid JSON in request body", param="body")
        body[RECEIVED_BODY_FIELD] = base64.b64encode(got).decode()
        headers = {HEADER_POD: "vllm-0", HEADER_BODY_SHA256: hashlib.sha256(got).hexdigest(),
                   HEADER_BODY_BYTES: str(len(got))}
        return Sent(ClientResult(trace_id="t", status=status, headers=headers, body=body), None, self.protocol)


def test_body_values_kept_fails_a_body_cut_short_with_its_counts_and_first_difference():
    result = body_values_kept(_BodiesThrough(lambda data: data[:CUT]))
    assert result.status == FAIL, result
    message = result.message
    assert "1,200,000 B, 1,200,000 B in 20 pieces: 65,536 of 1,200,000 bytes arrived; values lost" in message, message
    assert "first difference at byte 65,536" in message and "the backend answered HTTP 400" in message, message
    assert "re-encod" not in message and "not run" not in message, message


def test_bodies_byte_for_byte_never_calls_a_loss_a_reencoding():
    result = bodies_byte_for_byte(_BodiesThrough(lambda data: data[:CUT]))
    assert result.status == FAIL and "re-encoded" not in result.message, result.message
    assert ("data lost on the way: 1,200,000 B, 1,200,000 B in 20 pieces: 65,536 of 1,200,000 bytes arrived"
            in result.message), result.message
    spaced = bodies_byte_for_byte(_BodiesThrough(lambda data: data.replace(b" ", b"", 1)))
    assert "200 B, 1,200,000 B, 1,200,000 B in 20 pieces reached the backend re-encoded" in spaced.message, spaced
    assert body_values_kept(_BodiesThrough(lambda data: data.replace(b" ", b"", 1))).status == PASS


def _reencode_small_lose_large(data):
    """An EPP that re-encodes a small body as Go's encoding/json does (values change) and never answers a large one."""
    if len(data) > 100_000:
        return None
    if not data:
        return data
    decoded = json.loads(data)
    decoded["seed"] = float(decoded["seed"])
    return json.dumps(decoded).encode()


def test_a_body_never_answered_does_not_hide_the_values_another_body_lost():
    # CI: GAIE's EPP under load answered no 1.2 MB body within 4 s; the 200 B body had shown its changed values
    result = body_values_kept(_BodiesThrough(_reencode_small_lose_large))
    assert result.status == FAIL, result
    assert "$.seed was 9007199254740993, arrived 9007199254740992" in result.message, result.message
    assert "also: the 1,200,000 B body was not served: no answer after 4 s" in result.message, result.message
    assert bodies_byte_for_byte(_BodiesThrough(_reencode_small_lose_large)).status == FAIL


def test_a_round_with_a_body_never_answered_and_nothing_wrong_in_the_rest_is_not_run_never_passed():
    def lose_large(data):
        return None if len(data) > 100_000 else data

    for judge in (body_values_kept, bodies_byte_for_byte):
        with pytest.raises(NotWitnessed, match="a 1,200,000 B body .* was not served as intended: no answer after 4 s"):
            judge(_BodiesThrough(lose_large))
