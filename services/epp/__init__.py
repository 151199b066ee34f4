"""The Endpoint Picker: an Envoy ext_proc gRPC server speaking the Gateway API Inference Extension
EPP protocol (``python -m eppkit.services.epp``; see docs/modes-ext_proc.md)."""
