"""The sidecar frontend of the Dynamo proposal: tokenizes and routes when the EPP asks it with
``x-routing-request: true`` (``python -m eppkit.services.frontend``; see docs/modes-ext_proc.md)."""
