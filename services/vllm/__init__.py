"""Mock vLLM: OpenAI API, prefill/decode/both roles, latency model, traced (docs/mocks.md)."""
