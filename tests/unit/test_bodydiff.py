"""A changed body is shown, not hashed (eppkit.conformance.bodydiff): where it first differs, and whether the JSON
still says the same — every key, duplicate and exact number — or which values a re-encoder lost."""

from __future__ import annotations

import json

import pytest

from eppkit.conformance.bodydiff import first_difference, json_kept
from eppkit.conformance.checks.protocol import _body

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
