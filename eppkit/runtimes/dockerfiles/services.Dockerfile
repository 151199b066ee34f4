# The kit's services, observability and core packages (import name eppkit) on top of their dependencies;
# the testbed drives them from the host. Rebuilt on every source change, which is quick: only this
# small layer is new. Importing every service module proves the dependency layer has all they need.
ARG DEPS
FROM ${DEPS}
COPY eppkit/ /opt/eppkit/eppkit/
ENV PYTHONPATH=/opt/eppkit
RUN python -c "import importlib, pkgutil, eppkit.services as s; \
[importlib.import_module(m.name) for m in pkgutil.walk_packages(s.__path__, 'eppkit.services.') \
 if not m.name.endswith('__main__')]"
WORKDIR /tmp
