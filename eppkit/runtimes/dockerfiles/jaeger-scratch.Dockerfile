# Jaeger v2 with no registry: the static binary `eppkit bootstrap` built (CGO_ENABLED=0)
# on an empty base. Its config is bind-mounted from the run folder at run time.
FROM scratch
COPY rootfs/ /
ENTRYPOINT ["/usr/local/bin/jaeger"]
