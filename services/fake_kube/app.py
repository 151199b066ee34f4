"""Fake Kubernetes API server, just enough for the GAIE EPP (v1.5.0: client-go 0.35, controller-runtime 0.23).

Serves over plain HTTP, no auth:
  discovery   /version /api /apis /api/v1 /apis/<group> /apis/<group>/<version>   (legacy, not aggregated discovery)
  core/v1     pods (list / watch / get), events (create: accepted and dropped)
  inference.networking.k8s.io/v1          inferencepools (one object, list / watch / get)
  inference.networking.x-k8s.io/v1alpha2  inferenceobjectives, inferencemodelrewrites (empty; only with --with-v1alpha2)
  coordination.k8s.io/v1                  leases (in memory; only needed with --ha-enable-leader-election)
Watches: chunked JSON event lines; BOOKMARK events when allowWatchBookmarks=true; sendInitialEvents=true (WatchList)
is honoured (ADDED for every object, then a BOOKMARK with the k8s.io/initial-events-end annotation); timeoutSeconds ends
the stream. Label selectors (k=v, k==v, k!=v) and field selectors on metadata.name / metadata.namespace are applied.

Test hooks (not Kubernetes API):
  GET  /_fake/state                               pods and pool as JSON
  POST /_fake/pods/<name>?ready=true|false        flip the pod's Ready condition (MODIFIED event)
  POST /_fake/pods/<name>?ip=A.B.C.D[&labels=k=v,k2=v2]   create or replace a pod (ADDED / MODIFIED)
  DELETE /_fake/pods/<name>                       delete the pod (DELETED event)
  POST /_fake/pool?ports=8000,8001[&selector=k=v] change the pool (MODIFIED event)
  DELETE /_fake/pool                              delete the pool (DELETED event)

Every request is logged (method, path, query, Accept, User-Agent) to stderr. ``GET /health`` answers 200
(the kit's readiness check). Written by hand: an upstream EPP insists on an API server, and the
real one (or envtest's etcd + kube-apiserver) is far more than a test kit should start for one pool.

Example:
  python -m eppkit.services.fake_kube --port 16443 --namespace default --pool-name vllm-pool --target-port 8000 \\
      --label app=vllm --pod vllm-0=127.0.0.2 --pod vllm-1=127.0.0.3
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
import uuid
from datetime import datetime, timezone

from aiohttp import web

log = logging.getLogger("fake_kube")

INF_GROUP = "inference.networking.k8s.io"
INF_VERSION = "v1"
INFX_GROUP = "inference.networking.x-k8s.io"
INFX_VERSION = "v1alpha2"
COORD_GROUP = "coordination.k8s.io"


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    """All objects, keyed by resource then (namespace, name). One global resourceVersion counter."""

    def __init__(self) -> None:
        self.rv = 1
        self.objects: dict[str, dict[tuple[str, str], dict]] = {
            "pods": {}, "inferencepools": {}, "inferenceobjectives": {}, "inferencemodelrewrites": {}, "leases": {},
        }
        self.watchers: list[tuple[str, str | None, dict, asyncio.Queue]] = []

    def next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def put(self, resource: str, obj: dict) -> str:
        md = obj["metadata"]
        key = (md.get("namespace", ""), md["name"])
        existed = key in self.objects[resource]
        md.setdefault("uid", str(uuid.uuid4()))
        md.setdefault("creationTimestamp", now_rfc3339())
        md["resourceVersion"] = self.next_rv()
        self.objects[resource][key] = obj
        etype = "MODIFIED" if existed else "ADDED"
        self.notify(resource, etype, obj)
        return etype

    def delete(self, resource: str, ns: str, name: str) -> dict | None:
        obj = self.objects[resource].pop((ns, name), None)
        if obj is not None:
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = self.next_rv()
            self.notify(resource, "DELETED", obj)
        return obj

    def notify(self, resource: str, etype: str, obj: dict) -> None:
        for res, ns, sel, q in self.watchers:
            if res == resource and (ns is None or obj["metadata"].get("namespace") == ns) and matches(obj, sel):
                q.put_nowait({"type": etype, "object": obj})

    def list(self, resource: str, ns: str | None, sel: dict) -> list[dict]:
        out = []
        for (ons, _), obj in sorted(self.objects[resource].items()):
            if (ns is None or ons == ns) and matches(obj, sel):
                out.append(obj)
        return out


def parse_selectors(query) -> dict:
    """{'labels': [(key, op, value)], 'fields': [(key, op, value)]}"""

    def parse(s: str):
        out = []
        for part in filter(None, (p.strip() for p in s.split(","))):
            for op in ("!=", "==", "="):
                if op in part:
                    k, v = part.split(op, 1)
                    out.append((k.strip(), "!=" if op == "!=" else "=", v.strip()))
                    break
            else:  # bare key: existence
                out.append((part, "exists", ""))
        return out

    return {"labels": parse(query.get("labelSelector", "")), "fields": parse(query.get("fieldSelector", ""))}


def matches(obj: dict, sel: dict) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for k, op, v in sel.get("labels", []):
        if op == "exists" and k not in labels:
            return False
        if op == "=" and labels.get(k) != v:
            return False
        if op == "!=" and labels.get(k) == v:
            return False
    for k, op, v in sel.get("fields", []):
        actual = {"metadata.name": obj["metadata"]["name"], "metadata.namespace": obj["metadata"].get("namespace", "")}.get(k)
        if (op == "=" and actual != v) or (op == "!=" and actual == v):
            return False
    return True


def make_pod(name: str, ns: str, ip: str, labels: dict, ready: bool, port: int) -> dict:
    cond = "True" if ready else "False"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
        "spec": {
            "nodeName": "fake-node",
            "containers": [{"name": "vllm", "image": "mock-vllm", "ports": [{"containerPort": port, "protocol": "TCP"}]}],
        },
        "status": {
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "hostIP": "127.0.0.1",
            "startTime": now_rfc3339(),
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": now_rfc3339()},
                {"type": "ContainersReady", "status": cond, "lastTransitionTime": now_rfc3339()},
                {"type": "Ready", "status": cond, "lastTransitionTime": now_rfc3339()},
            ],
        },
    }


def make_pool(name: str, ns: str, labels: dict, ports: list[int], epp_port: int) -> dict:
    return {
        "apiVersion": f"{INF_GROUP}/{INF_VERSION}",
        "kind": "InferencePool",
        "metadata": {"name": name, "namespace": ns, "generation": 1},
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "targetPorts": [{"number": p} for p in ports],
            "endpointPickerRef": {"name": f"{name}-epp", "port": {"number": epp_port}, "failureMode": "FailClose"},
        },
    }


# --- resource catalogue: (group, version, resource) -> (kind, namespaced, listKind)
RESOURCES = {
    ("", "v1", "pods"): ("Pod", True),
    ("", "v1", "events"): ("Event", True),
    (INF_GROUP, INF_VERSION, "inferencepools"): ("InferencePool", True),
    (INFX_GROUP, INFX_VERSION, "inferenceobjectives"): ("InferenceObjective", True),
    (INFX_GROUP, INFX_VERSION, "inferencemodelrewrites"): ("InferenceModelRewrite", True),
    (COORD_GROUP, "v1", "leases"): ("Lease", True),
}
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


class FakeKube:
    def __init__(self, args) -> None:
        self.args = args
        self.store = Store()
        self.groups = {INF_GROUP: [INF_VERSION], COORD_GROUP: ["v1"]}
        if args.with_v1alpha2:
            self.groups[INFX_GROUP] = [INFX_VERSION]
        labels = dict(kv.split("=", 1) for kv in args.label)
        self.labels = labels
        for spec in args.pod:
            name, ip = spec.split("=", 1)
            self.store.put("pods", make_pod(name, args.namespace, ip, labels, True, args.target_port[0]))
        if not args.no_pool:
            self.store.put("inferencepools", make_pool(args.pool_name, args.namespace, labels, args.target_port, args.epp_port))

    # --- helpers
    def served(self, group: str, version: str) -> bool:
        if group == "":
            return version == "v1"
        return version in self.groups.get(group, [])

    @staticmethod
    def status(code: int, reason: str, message: str) -> web.Response:
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code}
        return web.json_response(body, status=code)

    # --- discovery
    async def version(self, request):
        return web.json_response({"major": "1", "minor": "35", "gitVersion": "v1.35.0-fake", "gitCommit": "fake",
                                  "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.26",
                                  "compiler": "gc", "platform": "linux/amd64"})

    async def api(self, request):
        return web.json_response({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self.args.port}"}]})

    def group_obj(self, g: str) -> dict:
        vs = self.groups[g]
        return {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}}

    async def apis(self, request):
        return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": [self.group_obj(g) for g in self.groups]})

    async def api_group(self, request):
        g = request.match_info["group"]
        if g not in self.groups:
            return self.status(404, "NotFound", "the server could not find the requested resource")
        return web.json_response({"kind": "APIGroup", "apiVersion": "v1", **self.group_obj(g)})

    def resource_list(self, group: str, version: str):
        gv = f"{group}/{version}" if group else version
        res = [{"name": r, "singularName": kind.lower(), "namespaced": nsd, "kind": kind, "verbs": VERBS}
               for (g, v, r), (kind, nsd) in RESOURCES.items() if g == group and v == version]
        return web.json_response({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": res})

    async def core_v1(self, request):
        return self.resource_list("", "v1")

    async def group_version(self, request):
        g, v = request.match_info["group"], request.match_info["version"]
        if not self.served(g, v):
            return self.status(404, "NotFound", "the server could not find the requested resource")
        return self.resource_list(g, v)

    # --- resources
    async def resource(self, request):
        mi = request.match_info
        group = mi.get("group", "")
        version = mi.get("version", "v1")
        resource = mi["resource"]
        ns = mi.get("ns")
        name = mi.get("name")
        if not self.served(group, version) or (group, version, resource) not in RESOURCES:
            return self.status(404, "NotFound", "the server could not find the requested resource")
        kind, _ = RESOURCES[(group, version, resource)]
        api_version = f"{group}/{version}" if group else version
        if resource == "events":  # the EPP's event recorder: accept and drop
            body = await request.json() if request.can_read_body else {}
            return web.json_response(body, status=201)
        store = self.store

        if request.method == "GET" and name is None:
            sel = parse_selectors(request.query)
            if request.query.get("watch") in ("true", "1"):
                return await self.watch(request, resource, ns, sel, kind, api_version)
            items = store.list(resource, ns, sel)
            return web.json_response({"kind": kind + "List", "apiVersion": api_version,
                                      "metadata": {"resourceVersion": str(store.rv)}, "items": items})
        if request.method == "GET":
            obj = store.objects[resource].get((ns or "", name))
            if obj is None:
                return self.status(404, "NotFound", f'{resource} "{name}" not found')
            return web.json_response(obj)
        if request.method == "POST":  # create (leases)
            obj = await request.json()
            obj.setdefault("metadata", {})["namespace"] = ns
            if (ns, obj["metadata"]["name"]) in store.objects[resource]:
                return self.status(409, "AlreadyExists", f'{resource} "{obj["metadata"]["name"]}" already exists')
            obj.setdefault("apiVersion", api_version)
            obj.setdefault("kind", kind)
            store.put(resource, obj)
            return web.json_response(obj, status=201)
        if request.method == "PUT":
            obj = await request.json()
            old = store.objects[resource].get((ns or "", name))
            if old is None:
                return self.status(404, "NotFound", f'{resource} "{name}" not found')
            want = obj.get("metadata", {}).get("resourceVersion")
            if want and want != old["metadata"]["resourceVersion"]:
                return self.status(409, "Conflict", "the object has been modified")
            obj["metadata"]["namespace"] = ns
            obj["metadata"]["uid"] = old["metadata"]["uid"]
            store.put(resource, obj)
            return web.json_response(obj)
        if request.method == "DELETE":
            obj = store.delete(resource, ns or "", name)
            if obj is None:
                return self.status(404, "NotFound", f'{resource} "{name}" not found')
            return web.json_response(obj)
        return self.status(405, "MethodNotAllowed", f"{request.method} not supported by the fake")

    async def watch(self, request, resource, ns, sel, kind, api_version):
        q = request.query
        if self.args.no_watchlist and q.get("sendInitialEvents") in ("true", "1"):
            # what an API server without the WatchList feature answers; client-go then falls back to LIST + WATCH
            return self.status(422, "Invalid", "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled")
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
        initial = q.get("sendInitialEvents") in ("true", "1")
        timeout = float(q.get("timeoutSeconds", "0") or 0) or None
        since = q.get("resourceVersion", "")
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
        await resp.prepare(request)
        queue: asyncio.Queue = asyncio.Queue()
        entry = (resource, ns, sel, queue)
        self.store.watchers.append(entry)

        async def send(ev):
            await resp.write((json.dumps(ev) + "\n").encode())

        def bookmark(extra_annotations=None):
            md = {"resourceVersion": str(self.store.rv)}
            if extra_annotations:
                md["annotations"] = extra_annotations
            return {"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": md}}

        try:
            if initial:  # WatchList: the current state as ADDED events, then the end-of-initial-events bookmark
                for obj in self.store.list(resource, ns, sel):
                    await send({"type": "ADDED", "object": obj})
                await send(bookmark({"k8s.io/initial-events-end": "true"}))
            elif since and since != "0":  # events newer than `since` are not replayed (no history kept); fine here
                pass
            deadline = time.monotonic() + timeout if timeout else None
            while True:
                wait = self.args.bookmark_interval
                if deadline is not None:
                    wait = min(wait, max(0.0, deadline - time.monotonic()))
                    if wait <= 0:
                        break
                try:
                    ev = await asyncio.wait_for(queue.get(), timeout=wait)
                    await send(ev)
                except asyncio.TimeoutError:
                    if bookmarks:
                        await send(bookmark())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.store.watchers.remove(entry)
        try:
            await resp.write_eof()
        except Exception:
            pass
        return resp

    # --- test hooks
    async def fake_state(self, request):
        return web.json_response({k: list(v.values()) for k, v in self.store.objects.items() if k in ("pods", "inferencepools")})

    async def fake_pod(self, request):
        name = request.match_info["name"]
        ns = self.args.namespace
        if request.method == "DELETE":
            obj = self.store.delete("pods", ns, name)
            return web.json_response({"deleted": obj is not None})
        q = request.query
        old = self.store.objects["pods"].get((ns, name))
        if "ip" in q or old is None:
            labels = dict(kv.split("=", 1) for kv in q["labels"].split(",")) if q.get("labels") else self.labels
            pod = make_pod(name, ns, q.get("ip", "127.0.0.9"), labels, q.get("ready", "true") == "true", self.args.target_port[0])
        else:
            pod = copy.deepcopy(old)
            if "ready" in q:
                val = "True" if q["ready"] == "true" else "False"
                for c in pod["status"]["conditions"]:
                    if c["type"] in ("Ready", "ContainersReady"):
                        c["status"] = val
                        c["lastTransitionTime"] = now_rfc3339()
        etype = self.store.put("pods", pod)
        return web.json_response({"event": etype, "pod": pod})

    async def fake_pool(self, request):
        ns, name = self.args.namespace, self.args.pool_name
        if request.method == "DELETE":
            return web.json_response({"deleted": self.store.delete("inferencepools", ns, name) is not None})
        q = request.query
        ports = [int(p) for p in q["ports"].split(",")] if q.get("ports") else self.args.target_port
        labels = dict(kv.split("=", 1) for kv in q["selector"].split(",")) if q.get("selector") else self.labels
        pool = make_pool(name, ns, labels, ports, self.args.epp_port)
        old = self.store.objects["inferencepools"].get((ns, name))
        if old:
            pool["metadata"]["uid"] = old["metadata"]["uid"]
            pool["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        return web.json_response({"event": self.store.put("inferencepools", pool), "pool": pool})


@web.middleware
async def log_requests(request, handler):
    t0 = time.monotonic()
    resp = None
    if request.query.get("watch") in ("true", "1"):  # long-running: log the start too
        log.info("%s %s?%s -> watch opened accept=%r", request.method, request.path, request.query_string,
                 request.headers.get("Accept", ""))
    try:
        resp = await handler(request)
        return resp
    finally:
        status = getattr(resp, "status", "exc")
        log.info("%s %s%s -> %s (%.1f ms) accept=%r ua=%r", request.method, request.path,
                 ("?" + request.query_string) if request.query_string else "", status,
                 (time.monotonic() - t0) * 1000, request.headers.get("Accept", ""),
                 request.headers.get("User-Agent", "")[:60])


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def build_app(fk: FakeKube) -> web.Application:
    app = web.Application(middlewares=[log_requests])
    r = app.router
    r.add_get("/version", fk.version)
    r.add_get("/api", fk.api)
    r.add_get("/api/v1", fk.core_v1)
    r.add_get("/apis", fk.apis)
    r.add_get("/apis/{group}", fk.api_group)
    r.add_get("/apis/{group}/{version}", fk.group_version)
    for prefix in ("/api/{version:v1}", "/apis/{group}/{version}"):
        r.add_route("*", prefix + "/{resource}", fk.resource)
        r.add_route("*", prefix + "/namespaces/{ns}/{resource}", fk.resource)
        r.add_route("*", prefix + "/namespaces/{ns}/{resource}/{name}", fk.resource)
    r.add_get("/_fake/state", fk.fake_state)
    r.add_get("/health", health)
    r.add_route("*", "/_fake/pods/{name}", fk.fake_pod)
    r.add_route("*", "/_fake/pool", fk.fake_pool)
    return app


KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: http://{host}:{port}
contexts:
- name: fake
  context: {{cluster: fake, user: fake, namespace: {ns}}}
current-context: fake
users:
- name: fake
  user: {{}}
"""
