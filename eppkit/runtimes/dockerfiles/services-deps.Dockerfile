# The kit's Python dependencies in a virtualenv, installed with no network at all: every
# wheel was downloaded on the host into wheels/ (eppkit/runtimes/images/). BASE is either the
# official python slim image or a Debian rootfs made with debootstrap and `docker import`.
ARG BASE
FROM ${BASE} AS build
# Labelled so the stage left behind (untagged) is pruned after the build.
LABEL eppkit=1
COPY wheels/ /wheels/
# pip itself comes from its wheel too (a bare Debian python3 has no pip and no ensurepip).
# xds-protos ships an older copy of opentelemetry/proto: opentelemetry-proto's files go back
# on top (the same repair as eppkit/builds/python_deps.py on the host), and an import proves it.
RUN python3 -m venv --without-pip /opt/venv \
 && PIP_WHEEL="$(ls /wheels/pip-*.whl)" \
 && /opt/venv/bin/python "$PIP_WHEEL/pip" install --no-index --find-links /wheels --no-cache-dir --quiet pip \
 && /opt/venv/bin/pip install --no-index --find-links /wheels --no-cache-dir \
      -r /wheels/requirements.txt -c /wheels/constraints.txt \
 && /opt/venv/bin/pip install --no-index --find-links /wheels --no-cache-dir --no-deps --force-reinstall \
      -c /wheels/constraints.txt opentelemetry-proto \
 && /opt/venv/bin/python -c "from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope; \
import grpc, aiohttp, envoy.service.ext_proc.v3.external_processor_pb2"

FROM ${BASE}
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LANG=C.UTF-8
WORKDIR /tmp
