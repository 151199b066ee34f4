"""Deterministic tokens across interpreters: Python's hash randomisation must not change them."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_tokens_do_not_depend_on_python_hash_seed():
    code = "from eppkit.services.openai_server import tokens; print(tokens.output_tokens(1, 'x', 5))"
    outs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": str(h)}).stdout
        for h in (1, 2)
    }
    assert len(outs) == 1
