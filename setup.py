"""The distribution's packages, found by setuptools' discovery (pyproject.toml holds everything else).

One import name, ``eppkit``: the folder ``eppkit/`` is that package, and every folder beside it that
the kit ships is ``eppkit.<folder>`` (``services/`` is ``eppkit.services``, ``observability/`` is
``eppkit.observability``; ``envoy/`` and ``plugins/`` hold no Python, only data). Importing such a
folder by its bare name from a checkout fails, naming the right import (its ``__init__.py``).
"""

from setuptools import find_packages, setup

# Folders beside eppkit/ that are subpackages of it; data-only ones have no __init__.py.
MAPPED = ("services", "observability", "envoy", "plugins")
# Package data by pattern, relative to each package's folder (the Dockerfiles, Envoy and Jaeger
# templates, the HTML pages' assets, the Lua filter, the plugin gallery's Lua filters and Go module, the dynamic module's Go
# sources, the floors' and the load client's Go sources, the load tool's and the vLLM preset's pins).
DATA = ["py.typed", "*.j2", "templates/*.j2", "templates/*.css", "templates/*.js", "dockerfiles/*.Dockerfile",
        "lua/*.lua", "gallery/*.lua", "gallery/go/go.mod", "gallery/go/go.sum", "gallery/go/*.go",
        "dynamic_module/go.mod", "dynamic_module/go.sum", "dynamic_module/*.go",
        "dynamic_module/internal/**/*.go", "dynamic_module/README.md",
        "pause/*.go", "pause/go.mod", "jaeger_build/*.go", "floors/*.go", "floors/go.mod", "floors/go.sum",
        "loadgen/*.go", "loadgen/go.mod", "loadgen/go.sum", "*_constraints.txt"]


def packages() -> list[str]:
    found = find_packages(include=["eppkit", "eppkit.*"])
    for folder in MAPPED:
        found += [f"eppkit.{folder}"] + [f"eppkit.{folder}.{sub}" for sub in find_packages(folder)]
    return found


setup(packages=packages(), package_dir={f"eppkit.{folder}": folder for folder in MAPPED},
      package_data={"": DATA})
