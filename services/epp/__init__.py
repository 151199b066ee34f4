"""The Endpoint Picker: an Envoy ext_proc gRPC server speaking the Gateway API Inference Extension
EPP protocol (``python -m eppkit.services.epp``; see docs/modes-ext_proc.md)."""

# When the two-phase multipart flow injects part 2: on the first response body chunk (the first
# token) of a streamed request, or on the response headers. Here, not in stream.py, so the testbed
# can read it without importing the server (and OpenTelemetry's exporter).
MULTIPART_TRIGGERS = ("first-token", "headers")
