"""eppkit.observability (this folder is mapped into the eppkit package: setup.py)."""

if __name__ != "eppkit.observability":  # imported by its folder's bare name from a checkout: it would load twice
    raise ImportError(f"import eppkit.observability, not {__name__}: the folder observability/ is the package eppkit.observability "
                      "(pip install -e . maps it)")
