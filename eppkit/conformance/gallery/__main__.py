"""``python -m eppkit.conformance.gallery NAME``: the gallery filter's path (no NAME: every one, with what it does)."""

import sys

from eppkit.conformance.gallery import GALLERY, path

if len(sys.argv) > 1:
    print(path(sys.argv[1]))
else:
    print("\n".join(f"{name:<24} {path(name)}  ({what})" for name, what in GALLERY.items()))
