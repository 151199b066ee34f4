"""The Endpoint Picker: an Envoy ext_proc gRPC server speaking the Gateway API Inference Extension
EPP protocol (``python -m services.epp``; see docs/modes-ext_proc.md)."""
