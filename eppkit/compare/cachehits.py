"""Where requests landed against where their prompt's blocks were: each mode's prefix-cache hits, from the pods' own
prefill spans (``vllm.prefix_cached_tokens`` of the prompt's tokens), as a table beside the latencies.

A picker that knows where the blocks are (``kv-events-scorer``, from the pods' KV-cache events) sends a prompt that
shares a prefix to the pod that holds it; one that does not leaves the hits to chance. The same workload through
every mode makes the rates comparable; a scenario without shared prefixes shows near zero everywhere.
"""

from __future__ import annotations

from eppkit.compare import tables
from eppkit.observability.contract import Eppkit, Vllm
from eppkit.observability.trace_model import Trace


def of_trace(trace: Trace) -> list | None:
    """[prompt tokens found in the prefix cache, prompt tokens, what the picker predicted it would find (None when it
    said nothing)] over the trace's prefill spans and its picker's; None without a prefill span."""
    spans = [s for s in trace.spans if s.name == Vllm.PREFILL and Vllm.PREFIX_CACHED_TOKENS in s.attributes]
    if not spans:
        return None
    cached = sum(int(s.attributes[Vllm.PREFIX_CACHED_TOKENS]) for s in spans)
    uncached = sum(int(s.attributes.get(Vllm.PREFILL_UNCACHED_TOKENS, 0)) for s in spans)
    predicted = next((int(s.attributes[Eppkit.PREDICTED_CACHED_TOKENS]) for s in trace.spans
                      if Eppkit.PREDICTED_CACHED_TOKENS in s.attributes), None)
    return [cached, cached + uncached, predicted]


def summarize(samples: list[dict]) -> dict | None:
    """The mode's hits over its successful requests: cached and prompt tokens, their ratio, requests with a hit."""
    seen = [(list(s["prefix"]) + [None])[:3] for s in samples if s.get("ok") and s.get("prefix")]
    if not seen:
        return None
    cached, prompt = sum(c for c, _, _ in seen), sum(p for _, p, _ in seen)
    out = {"requests": len(seen), "with_hit": sum(1 for c, _, _ in seen if c > 0), "cached_tokens": cached,
           "prompt_tokens": prompt, "ratio": round(cached / prompt, 4) if prompt else None}
    predicted = [(c, guess) for c, _, guess in seen if guess is not None]
    if predicted:  # the picker said what it expected: how often the pod found exactly that
        out["predicted_tokens"] = sum(guess for _, guess in predicted)
        out["as_predicted"] = sum(1 for c, guess in predicted if c == guess)
        out["predicted_requests"] = len(predicted)
    return out


def table(block: dict) -> tables.Table | None:
    modes = [(m, r["prefix_cache"]) for m, r in block.get("modes", {}).items()
             if r.get("status") == "ok" and r.get("prefix_cache")]
    if not modes or not any(p["cached_tokens"] for _, p in modes):
        return None
    rows = [[m, f"{r.get('scorer') or '–'}", tables.pct(p["ratio"]), f"{p['with_hit']}/{p['requests']}",
             f"{p['cached_tokens']}/{p['prompt_tokens']}",
             f"{p['predicted_tokens']}" if "predicted_tokens" in p else "–",
             f"{p['as_predicted']}/{p['predicted_requests']}" if "as_predicted" in p else "–"] for m, p in modes
            for r in [block["modes"][m]]]
    return tables.Table("Prefix cache, from the pods' prefill spans", ("mode", "scorer", "hit rate",
                                                                        "requests with a hit", "cached / prompt tokens",
                                                                        "predicted tokens", "as predicted"),
                        rows, notes=["hit rate: prompt tokens the serving pod already held over all prompt tokens "
                                     "(vllm.prefix_cached_tokens); a picker that knows where the blocks are "
                                     "(kv-events-scorer) raises it on prompts that share a prefix. predicted: what "
                                     "the picker said it expected the pod to hold (eppkit.kv.predicted_cached_tokens); "
                                     "as predicted: requests whose pod found exactly that"])
