"""The Endpoint Picker: an Envoy ext_proc gRPC server speaking the Gateway API Inference Extension
EPP protocol (``python -m eppkit.services.epp``; see docs/modes-ext_proc.md)."""

# When the two-phase multipart flow injects part 2: on the first response body chunk (the first
# token) of a streamed request, or on the response headers. Here, not in stream.py, so the testbed
# can read it without importing the server (and OpenTelemetry's exporter).
MULTIPART_TRIGGERS = ("first-token", "headers")

# How Envoy sends the request body to the EPP (the ext_proc filter's request_body_mode): streamed chunk by chunk as it
# arrives and echoed back (FULL_DUPLEX_STREAMED: the EPP protocol's, GAIE's EPP's), whole in one message once Envoy
# has buffered it (BUFFERED), or not at all, the EPP deciding on the headers (NONE). The first is the default.
REQUEST_BODY = {"streamed": "FULL_DUPLEX_STREAMED", "buffered": "BUFFERED", "none": "NONE"}
BODY_PATHS = tuple(REQUEST_BODY)
