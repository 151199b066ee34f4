"""eppkit benchmarks: ratios measured side by side in one run, with the machine they ran on.

``python -m bench`` runs the whole suite (bounded, under 10 minutes) and writes
``bench/results/<time>.md`` and ``.json``. Not tests: nothing here asserts a timing.
See docs/benchmarks.md for what is measured, how, and the latest figures.
"""
