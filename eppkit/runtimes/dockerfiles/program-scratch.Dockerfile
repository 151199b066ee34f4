# A program of this host (an ELF: GAIE's EPP as the kit built it) with no registry: the binary at its host path plus
# exactly the shared libraries `ldd` says it links (and the loader), on an empty base. The Pod or container names the
# program in its command. eppkit/runtimes/images/binaries.py lays the files out under rootfs/ at their host paths.
FROM scratch
ARG LIBDIRS
COPY rootfs/ /
# No /etc/ld.so.cache in an empty image: tell the loader where the libraries are.
ENV LD_LIBRARY_PATH=${LIBDIRS}
