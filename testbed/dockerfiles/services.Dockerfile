# This package (eppkit: services, observability, testbed) on top of its dependencies.
# Built on every source change; only this small layer is rebuilt.
ARG DEPS
FROM ${DEPS}
COPY eppkit/ /tmp/eppkit-src/
RUN pip install --no-index --no-deps --no-build-isolation --no-cache-dir --quiet /tmp/eppkit-src \
 && rm -rf /tmp/eppkit-src \
 && python -c "import services.vllm, observability.otel"
WORKDIR /tmp
