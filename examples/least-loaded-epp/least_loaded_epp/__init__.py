"""An Endpoint Picker that sends each request to the endpoint with the fewest requests in flight.

Written from the EPP protocol as eppkit's docs/epp-protocol.md describes it: one ext_proc stream per request
(FULL_DUPLEX_STREAMED), the body echoed back as streamed mutations, the decision as a header and as envoy.lb
metadata with the same value (primary, then fallbacks), 503 when no endpoint fits, 429 when it sheds, the
subset hint honoured, gRPC health for liveness, readiness and the ext_proc service, and its span a child of
the trace context Envoy puts into the stream's metadata. A request counts as in flight until its stream ends: with
the gateway sending it the response (ext_proc response processing), that is when the response has ended.
"""
