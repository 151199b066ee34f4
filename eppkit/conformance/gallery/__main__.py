"""``python -m eppkit.conformance.gallery [NAME]``: a gallery filter's path, or every one with what it does."""

import sys

from eppkit.conformance.gallery import main

main(sys.argv[1:])
