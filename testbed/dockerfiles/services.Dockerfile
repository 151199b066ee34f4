# This package (eppkit) on top of its dependencies: the import packages the containers run
# (services, observability; testbed drives them from the host). Rebuilt on every source
# change, which is quick: only this small layer is new.
# Importing every service module proves the dependency layer has all they need.
ARG DEPS
FROM ${DEPS}
COPY eppkit/ /tmp/eppkit-src/
RUN pip install --no-index --no-deps --no-build-isolation --no-cache-dir --quiet /tmp/eppkit-src \
 && rm -rf /tmp/eppkit-src \
 && python -c "import importlib, pkgutil, services; \
[importlib.import_module(m.name) for m in pkgutil.walk_packages(services.__path__, 'services.') \
 if not m.name.endswith('__main__')]"
WORKDIR /tmp
