"""The echo EPP: the smallest Endpoint Picker that follows the protocol, and one that breaks it on purpose.

It answers every ext_proc message at once: the request headers with its decision (round robin over its
pool, within the data plane's subset hint and there only over pods that accept a connection; GAIE's
``test-epp-endpoint-selection`` header forces it; given the pods' ``llm-d.ai/role``, ``--pod-roles``, a decode-capable
pod, and in a pool with prefill-only pods one of them named in ``x-prefiller-host-port``, as llm-d's EPP does), every
body chunk echoed back as a streamed mutation with its own ``end_of_stream``, trailers and response phases
passed through. It reads no body, so its hop is the floor of what an EPP costs behind Envoy (the benchmark
of bench/epp_hop.py). With ``--misbehave`` it commits one protocol fault, each the fault one conformance
check exists to catch (:data:`MISBEHAVIOURS`): the conformance suite's own tests prove each check with it.
"""

# Protocol faults on demand: name -> what the EPP then does wrong.
MISBEHAVIOURS = {
    "none": "nothing: it follows the protocol",
    "reply-out-of-order": "answers the request body before the request headers",
    "buffered-body-mutation": "answers body chunks with a whole-body mutation, not streamed ones",
    "drop-end-of-stream": "echoes the last body chunk without end_of_stream",
    "change-body": "drops the request body's first space (the same JSON values, no longer the client's bytes)",
    "truncate-body": "cuts every request body after 64 KiB (the chunks after it go back empty, end_of_stream kept: "
                     "the request completes with the body cut short)",
    "wait-for-body": "on a request without a body, waits for a body that never comes",
    "stall-response": "never answers the response body",
    "destination-mismatch": "names one endpoint in the header and another in the metadata",
    "no-health-services": "serves gRPC health for the server only, not liveness, readiness or ext_proc",
    "one-stream": "serves one stream at a time; a concurrent stream fails",
    "own-trace": "starts a trace of its own instead of joining Envoy's (reads no trace context)",
    "stops-after-n": "refuses every ext_proc stream after its first 600 (UNAVAILABLE), still SERVING on health",
    "leaks-per-stream": "keeps 128 KiB per stream for as long as it runs",
    "slows-per-stream": "waits longer the more streams it has opened before its request headers reply: (n / 1,000)^2 "
                        "x 100 ms at its n-th (25 ms at its 500th, 400 ms at its 2,000th): a decision that slows as "
                        "its state grows",
    # The field's known EPP bugs (docs/epp-bugs.md names each one's public issue).
    "unanswered-trailers": "never answers request or response trailers",
    "eos-only-on-empty-chunk": "ends the body only on an empty end_of_stream chunk: a last chunk with data and "
                               "end_of_stream goes back without it",
    "healthy-but-refusing": "says SERVING on gRPC health, but refuses every ext_proc stream (UNAVAILABLE)",
    "slow-decision": "waits 900 ms before its request headers reply",
    "empty-body-reply": "answers body chunks with an empty CommonResponse (no streamed mutation: GAIE #3028)",
    "metadata-on-response": "sends envoy.lb metadata again on its response headers reply, naming another pod (GAIE #2824)",
    "framing-headers": "sets transfer-encoding: chunked on its response headers reply (GAIE #2993, ai-gateway #2391)",
    # Saturation (its peers: this fault, and the echo EPP itself, which reads no objective and sheds nothing).
    "shed-every-objective": "answers 429 to every request that names an InferenceObjective "
                            "(x-gateway-inference-objective), whatever its priority and the pool's load",
    # Flow control (judged said --flow-control; each implies the echo EPP's queue, services/echo_epp/queue.py).
    "no-queue": "sheds (429) a request that arrives while the pool is saturated instead of queueing it",
    "fifo-bands": "queues every request in one band: a higher priority waits behind a lower one that came first",
    "one-flow": "queues every request of a band in one flow: the fairness id is ignored, first come first served",
    "ttl-never": "never drops a queued request: it waits past its TTL until the pool has room",
    "reencode-json": "reads the JSON body into a map of float64s and writes it again, as Go's json.Marshal does: "
                     "an integer above 2^53 rounded, a 17-digit float shortened, one of two duplicate keys kept "
                     "(GAIE #1126)",
    # The subset contract: 503 with an OpenAI-style error when no endpoint of the subset hint can serve.
    "empty-subset-ignored": "routes a request whose subset hint leaves no eligible endpoint round robin over the pool",
    "non-openai-503": "answers 503 with a plain-text body (no OpenAI-style JSON error; GAIE's EPP v1.5.0 does)",
    # P/D disaggregation (a pool labelled llm-d.ai/role: --pod-roles)
    "prefill-as-destination": "in a disaggregated pool, sends every request to a prefill-only pod",
    "decode-as-prefiller": "in a disaggregated pool, names a decode-only pod in x-prefiller-host-port",
}
SLOW_DECISION_S = 0.9  # slow-decision's wait
# stops-after-n's streams: above what any conformance check sends through one EPP process but sustained-load (some
# 160, the whole suite over several testbeds), far below its 2,000.
STOP_AFTER = 600
LEAK_BYTES = 128 * 1024  # leaks-per-stream's keep, per stream
SLOWS_BY_S = 0.1  # slows-per-stream's wait at its 1,000th stream; at its n-th, (n / 1,000)^2 times this
TRUNCATE_AT = 64 * 1024  # truncate-body's: the request body's bytes it lets through
PROBE_TIMEOUT_S = 0.25  # within a subset hint, a pod that accepts no connection in this long is not eligible
