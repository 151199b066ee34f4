"""eppkit.services (this folder is mapped into the eppkit package: setup.py)."""

if __name__ != "eppkit.services":  # imported by its folder's bare name from a checkout: it would load twice
    raise ImportError(f"import eppkit.services, not {__name__}: the folder services/ is the package eppkit.services "
                      "(pip install -e . maps it)")
