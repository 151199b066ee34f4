"""Helpers the tests share (import them as ``tests.support.<name>``; the ini's pythonpath puts the checkout on sys.path)."""
