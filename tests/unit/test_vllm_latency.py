"""The mock vLLM's latency model and flag validation (pure functions, no clock)."""

import random

import pytest
from eppkit.services.vllm.config import ConfigError, VllmConfig
from eppkit.services.vllm.latency import LatencyModel, jittered, token_deadlines

pytestmark = pytest.mark.unit


def model(**kw) -> LatencyModel:
    return LatencyModel(VllmConfig(**kw).validate())


def test_prefill_constant_ttft_without_jitter_is_exact():
    assert model(time_to_first_token=300).prefill_ms(1000, random.Random(0)) == 300


def test_prefill_per_token_counts_only_uncached_tokens():
    m = model(time_to_first_token=999, prefill_overhead=20, prefill_time_per_token=0.5)
    assert m.prefill_ms(100, random.Random(0)) == pytest.approx(20 + 50)
    assert m.prefill_ms(0, random.Random(0)) == pytest.approx(20)


def test_prefill_adds_ec_miss_latency_per_missing_item():
    m = model(time_to_first_token=100, ec_miss_latency=40)
    assert m.prefill_ms(10, random.Random(0), ec_misses=2) == pytest.approx(180)


def test_header_override_wins_over_flags():
    m = model(time_to_first_token=100, time_factor_under_load=3, max_num_seqs=2)
    assert m.prefill_ms(10, random.Random(0), running=2, override=7) == 7
    assert m.inter_token_ms(random.Random(0), override=3) == 3
    assert m.kv_transfer_ms(10, random.Random(0), override=11) == 11


def test_kv_transfer_per_token_replaces_constant():
    assert model(kv_cache_transfer_latency=50).kv_transfer_ms(100, random.Random(0)) == 50
    m = model(kv_cache_transfer_latency=50, kv_cache_transfer_time_per_token=0.2)
    assert m.kv_transfer_ms(100, random.Random(0)) == pytest.approx(20)


@pytest.mark.parametrize(
    "running, expected",
    [
        (1, 1.0),  # one request: no slowdown
        (5, 2.0),  # half way between 1 and max_num_seqs
        (9, 3.0),  # at max_num_seqs: the full factor
        (50, 3.0),  # beyond: capped
    ],
)
def test_load_factor_grows_linearly_to_max_num_seqs(running, expected):
    m = model(time_factor_under_load=3.0, max_num_seqs=9, inter_token_latency=10)
    assert m.load_factor(running) == pytest.approx(expected)
    assert m.inter_token_ms(random.Random(0), running=running) == pytest.approx(10 * expected)


def test_jitter_is_seeded_and_bounded():
    a = [jittered(100, 30, random.Random(f"s:{i}")) for i in range(2000)]
    b = [jittered(100, 30, random.Random(f"s:{i}")) for i in range(2000)]
    assert a == b
    assert min(a) >= 30 and max(a) <= 170
    assert 95 < sum(a) / len(a) < 105
    assert len(set(round(x, 6) for x in a)) > 1000


def test_token_deadlines_do_not_accumulate_lateness():
    # each deadline is computed from the previous deadline, never from "now"
    assert token_deadlines(10.0, [0.02, 0.02, 0.02]) == pytest.approx([10.02, 10.04, 10.06])


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"time_to_first_token": -1}, "--time-to-first-token cannot be negative"),
        ({"inter_token_latency": -0.5}, "--inter-token-latency cannot be negative"),
        ({"max_num_seqs": -3}, "--max-num-seqs cannot be negative"),
        ({"time_to_first_token": 100, "time_to_first_token_std_dev": 31}, "30%"),
        ({"inter_token_latency": 10, "inter_token_latency_std_dev": 4}, "--inter-token-latency-std-dev"),
        ({"kv_cache_transfer_latency": 10, "kv_cache_transfer_latency_std_dev": 5}, "--kv-cache-transfer-latency-std-dev"),
        ({"time_factor_under_load": 0.5}, "--time-factor-under-load"),
        ({"failure_injection_rate": 150}, "0..100"),
        ({"failure_types": ["explode"]}, "unknown failure type"),
        ({"role": "encoder"}, "--role"),
        ({"served_model_names": []}, "--served-model-name"),
    ],
)
def test_config_rejects_bad_values_at_load(kw, message):
    with pytest.raises(ConfigError, match=message.replace("-", r"\-").replace("%", "%")):
        VllmConfig(**kw).validate()


def test_config_accepts_jitter_at_exactly_30_percent_and_sim_failure_names():
    c = VllmConfig(time_to_first_token=100, time_to_first_token_std_dev=30, failure_types=["rate_limit", "server_error"]).validate()
    assert c.failure_types == ["429", "500"]


def test_cli_flags_reach_the_config():
    from eppkit.services.vllm.__main__ import build_parser
    from eppkit.services.vllm.config import from_args

    args = build_parser().parse_args(
        ["--role", "prefill", "--instance", "p0", "--served-model-name", "a", "--served-model-name", "b",
         "--time-to-first-token", "250", "--inter-token-latency", "15", "--seed", "7", "--max-num-seqs", "4"]
    )
    c = from_args(args)
    assert (c.role, c.instance, c.served_model_names, c.time_to_first_token, c.inter_token_latency, c.seed, c.max_num_seqs) == (
        "prefill", "p0", ["a", "b"], 250, 15, 7, 4)
    assert from_args(build_parser().parse_args([])).served_model_names == ["mock-llm"]
