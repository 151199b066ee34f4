"""A local Hugging Face tokenizer that counts as the kit's mock vLLM does: one token per match of its rule
(a word, or a single punctuation mark). Run by the load tool's own interpreter, which has ``tokenizers`` and
``transformers``; it imports nothing of eppkit (the load tool's virtualenv does not hold the kit).

    python word_tokenizer.py make OUT_DIR < {"pattern": ..., "words": [...]}   # tokenizer.json + tokenizer_config.json
    python word_tokenizer.py count DIR < ["text", ...]                         # prints [tokens per text] as JSON

Written here, with the ``tokenizers`` library doing the work, because no published tokenizer splits like the
mock: a ``WordLevel`` model over the given words and every ASCII punctuation mark, pre-tokenized by a
``Split`` on the mock's own pattern (``invert``: the matches are the tokens). A word outside the vocabulary
still counts one (``[UNK]``); the vocabulary only matters for decoding, which inference-perf's synthetic
data generators do. ``count`` loads the folder as inference-perf does (``AutoTokenizer.from_pretrained``).
"""

from __future__ import annotations

import json
import string
import sys
from pathlib import Path

UNK = "[UNK]"


def make(out: Path, pattern: str, words: list[str]) -> None:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {UNK: 0}
    for token in [*words, *string.punctuation]:
        vocab.setdefault(token, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=True)
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # decoding joins the tokens with spaces
    tokenizer.add_special_tokens([UNK])
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": UNK, "model_max_length": 1_000_000,
        "clean_up_tokenization_spaces": False}, indent=2) + "\n")


def count(folder: Path, texts: list[str]) -> list[int]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    return [len(tokenizer(text, add_special_tokens=False).input_ids) for text in texts]


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("make", "count"):
        print(__doc__, file=sys.stderr)
        return 2
    spec = json.load(sys.stdin)
    if argv[0] == "make":
        make(Path(argv[1]), spec["pattern"], spec["words"])
    else:
        print(json.dumps(count(Path(argv[1]), spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
