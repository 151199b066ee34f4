"""The echo EPP: the smallest Endpoint Picker that follows the protocol, and one that breaks it on purpose.

It answers every ext_proc message at once: the request headers with its decision (round robin over its
pool, within the data plane's subset hint; GAIE's ``test-epp-endpoint-selection`` header forces it), every
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
    "change-body": "drops the request body's first space (still valid JSON, no longer the client's bytes)",
    "wait-for-body": "on a request without a body, waits for a body that never comes",
    "stall-response": "never answers the response body",
    "destination-mismatch": "names one endpoint in the header and another in the metadata",
    "no-health-services": "serves gRPC health for the server only, not liveness, readiness or ext_proc",
    "one-stream": "serves one stream at a time; a concurrent stream fails",
    "own-trace": "starts a trace of its own instead of joining Envoy's (reads no trace context)",
}
