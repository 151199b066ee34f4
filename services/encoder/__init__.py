"""Mock multimodal encoder: per-item encode spans, a shared encoder cache (docs/mocks.md)."""
