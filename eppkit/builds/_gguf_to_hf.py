"""GGUF -> safetensors and tokenizer files, offline: ``<vLLM venv>/bin/python _gguf_to_hf.py MODEL.gguf OUT_DIR``.

Run by :mod:`eppkit.builds.vllm_cpu` with the vLLM environment's Python (it has torch, transformers, gguf and
accelerate; the kit's own environment has none of them), so it imports nothing of eppkit and its imports wait
inside :func:`main` (the kit's wheel test imports every module).

transformers dequantizes the GGUF's weights to fp32 while loading, but keeps a GGUF quantization marker that
makes ``save_pretrained`` refuse ("not serializable"); the tensors are plain fp32 by then, so the marker goes.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(gguf_path: str, out_dir: str) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = os.path.split(os.path.abspath(gguf_path))
    started = time.monotonic()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    loaded = time.monotonic()
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    print(json.dumps({"load_s": round(loaded - started, 1), "save_s": round(time.monotonic() - loaded, 1),
                      "params": sum(p.numel() for p in model.parameters()), "dtype": str(model.dtype),
                      "chat_template": bool(getattr(tokenizer, "chat_template", None))}), flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} MODEL.gguf OUT_DIR")
    main(sys.argv[1], sys.argv[2])
