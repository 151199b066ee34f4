"""The encoder cache shared by the mock encoder and the mock vLLM through a directory.

Like vLLM's example EC connector, which stores each encoder output in a shared
directory under its multimodal hash: the encoder writes ``<dir>/<hash>.json`` per item,
a prefill (or PD) instance given the same ``--ec-cache-dir`` checks for the file and
records a hit or a miss. Writes go to a temporary file first and are renamed into place
so a reader never sees half an entry.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path

_HASH_RE = re.compile(r"^[0-9a-f]{16,128}$")


class EncoderCache:
    def __init__(self, directory: str | os.PathLike) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)

    def _path(self, mm_hash: str) -> Path:
        if not _HASH_RE.match(mm_hash):
            raise ValueError(f"not a media hash: {mm_hash!r}")
        return self.dir / f"{mm_hash}.json"

    def put(self, mm_hash: str, entry: dict) -> Path:
        path = self._path(mm_hash)
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump({**entry, "mm_hash": mm_hash, "written_at": time.time()}, f)
        os.replace(tmp, path)
        return path

    def contains(self, mm_hash: str) -> bool:
        return self._path(mm_hash).exists()

    def get(self, mm_hash: str) -> dict | None:
        try:
            return json.loads(self._path(mm_hash).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
