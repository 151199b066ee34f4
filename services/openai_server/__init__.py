"""What the mock vLLM and the mock encoder share as OpenAI-compatible servers: the request's parsing and checks
(``api``, ``handshake``, ``tokens``, ``media``), the answers (``responses``), the Prometheus metrics
(``metrics``), the encoder cache both sides of E/P read (``ec_cache``) and latency jitter (``jitter``). Both
mocks import this room; neither imports the other."""
