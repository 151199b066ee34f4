"""The kit's objects in a cluster's API, besides its Pods (:mod:`eppkit.cluster.pod`): the kit's labels, a testbed's namespace (made, deleted, swept when its session died), and a Pod's own
identity (a ServiceAccount bound to a Role of exactly the rules its program needs: an in-cluster EPP reads its
InferencePool and Pods with no more rights than its upstream chart gives it)."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

from eppkit.components.owner import LABEL, labels, owner_alive

POD_SECURITY = "pod-security.kubernetes.io/enforce"
OWNER_ANNOTATION = "eppkit.io/owner"  # has '/' and may pass 63 characters: not a label value


def label_value(value: str) -> str:
    """A label value Kubernetes takes: [A-Za-z0-9._-], at most 63 characters, alphanumeric at both ends."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", ".", value)[:63]
    return cleaned.strip("._-") or "x"


def dns_label(value: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")[:63].strip("-") or "eppkit"


def pod_labels(component: str, **extra: str) -> tuple[dict[str, str], dict[str, str]]:
    """The kit's labels (those of its containers, made label values) and the owner as an annotation."""
    raw = labels(component, **extra)
    owner = raw.pop(f"{LABEL}.owner")
    return {k: label_value(v) for k, v in raw.items()}, {OWNER_ANNOTATION: owner}


def ensure_namespace(name: str, api) -> str:
    """The testbed's namespace, created with the kit's labels and owner unless it exists; its name."""
    from lightkube import ApiError
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Namespace

    name = dns_label(name)
    lbls, notes = pod_labels("namespace")
    lbls[POD_SECURITY] = "privileged"  # its Pods use the host's network: a cluster enforcing Pod Security admits them
    try:
        api.create(Namespace(metadata=ObjectMeta(name=name, labels=lbls, annotations=notes)))
    except ApiError as exc:
        if exc.status.code != 409:
            raise
    return name


def delete_namespace(name: str, api, wait_s: float = 0.0) -> None:
    """Delete a testbed's namespace (its Pods were stopped already); with ``wait_s``, until none of its Pods is left
    (the sandboxes removed: nothing of the testbed runs), not until the namespace itself has gone."""
    from lightkube import ApiError
    from lightkube.resources.core_v1 import Namespace, Pod

    try:
        api.delete(Namespace, name, grace_period=0)
    except ApiError as exc:
        if exc.status.code != 404:
            raise
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(True for _ in api.list(Pod, namespace=name)):
        time.sleep(0.05)


def sweep(api) -> list[str]:
    """Delete the kit's namespaces whose owner is gone (a SIGKILLed session's); their names."""
    from lightkube.resources.core_v1 import Namespace

    gone = [ns.metadata.name for ns in api.list(Namespace, labels={LABEL: "1"})
            if not owner_alive((ns.metadata.annotations or {}).get(OWNER_ANNOTATION, ""))]
    for name in gone:
        delete_namespace(name, api)
    return gone


def owned_by(pid: int, api) -> set[str]:
    """The pods process ``pid`` started (``namespace/name``), in any namespace."""
    from lightkube.resources.core_v1 import Pod

    return {f"{p.metadata.namespace}/{p.metadata.name}"
            for p in api.list(Pod, namespace="*", labels={f"{LABEL}.owner-pid": str(pid)})}


def remove_session(session: str, api) -> list[str]:
    """Delete the namespaces of ``session`` still there; the names of those that still held Pods no one was
    stopping (a leak; an empty one is a session Jaeger's, whose Pod was stopped)."""
    from lightkube.resources.core_v1 import Namespace, Pod

    leaked = []
    for ns in api.list(Namespace, labels={f"{LABEL}.session": session}):
        if ns.status is not None and ns.status.phase == "Terminating":
            continue
        name = ns.metadata.name
        if any(p.metadata.deletionTimestamp is None for p in api.list(Pod, namespace=name)):  # none stopping
            leaked.append(name)
        delete_namespace(name, api)
    return leaked


def grant(namespace: str, name: str, rules: Sequence[dict], api) -> str:
    """ServiceAccount ``name`` in ``namespace``, and a Role and RoleBinding of that name giving it ``rules``
    (made once; a Role already there gets these rules). Its name."""
    from lightkube import ApiError
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.models.rbac_v1 import PolicyRule, RoleRef, Subject
    from lightkube.resources.core_v1 import ServiceAccount
    from lightkube.resources.rbac_authorization_v1 import Role, RoleBinding

    lbls, notes = pod_labels(name)
    meta = ObjectMeta(name=name, namespace=namespace, labels=lbls, annotations=notes)
    role = Role(metadata=meta, rules=[PolicyRule(**rule) for rule in rules])
    binding = RoleBinding(metadata=meta, roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="Role", name=name),
                          subjects=[Subject(kind="ServiceAccount", name=name, namespace=namespace)])
    for made in (ServiceAccount(metadata=meta), role, binding):
        try:
            api.create(made)
        except ApiError as exc:
            if exc.status.code != 409:
                raise
            if made is role:
                api.replace(role)
    return name
