"""A stand-in Kubernetes API server for the scheduler adapter's tests: kmock's KubernetesEmulator.

No kube-apiserver can run here (no package ships one; kind, k3s and envtest download binaries),
so the adapter talks real HTTP, through the official ``kubernetes`` client, to kmock's emulator:
an aiohttp server on 127.0.0.1 that keeps objects in memory. kmock is asyncio and the adapter is
sync, so the emulator runs in a background thread with its own event loop; every change a test
makes to it goes through that loop (``KubeStandIn._on_loop``).

Where kmock differs from a real API server, and what stands in for the real behaviour:
- The eviction subresource is unknown to it (404). ``KubeStandIn`` scripts it with a reaction:
  the pod is deleted and the real ``201 Status`` is answered, or, where a test's "PDB" says no,
  the real 429 (``RECORDED.pdb_refusal``). A real eviction only marks the pod terminating; it is
  gone after its grace period.
- It ignores ``fieldSelector`` on lists (a real server filters pods by ``spec.nodeName``): the
  adapter re-checks ``spec.nodeName`` itself, and the tests keep pods of other nodes around.
- Patches are plain JSON merges whatever their Content-Type, with no ``resourceVersion``
  precondition: the 409 a real server answers to a stale write is served from
  ``RECORDED.conflict``. A write reaches kmock's store even when a reaction answers it instead.
- The node status subresource (``PATCH /api/v1/nodes/{name}/status``) is unknown to it: the
  stand-in serves it, merging the patch's ``status`` into the node (RFC 7386, as a real server
  does for a JSON merge patch: a list is replaced whole, null deletes) and ignoring the rest.
- Events (``POST /api/v1/namespaces/default/events``) are stored as any object; ``events(node)``
  reads those whose involvedObject is the node.
- Its error bodies say ``reason: "Object Not Found"`` with a kmock hint for a message;
  ``RECORDED`` holds the bodies a real API server sends (``kube-apiserver`` 1.30, as
  ``kubectl -v=8`` prints them and ``k8s.io/apimachinery/pkg/api/errors`` builds them).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import kmock
import pytest

T = TypeVar("T")

# resource objects, not "v1/pods" strings: kmock's `key in objects` does not parse strings
NODES = kmock.resource("v1/nodes")
PODS = kmock.resource("v1/pods")
EVENTS = kmock.resource("v1/events")
STATUS_PATH = re.compile(r"/api/v1/nodes/(?P<name>[^/]+)/status")
EVICTION_PATH = re.compile(r"/api/v1/namespaces/(?P<namespace>[^/]+)/pods/(?P<name>[^/]+)/eviction")


class RECORDED:
    """Response bodies of a real kube-apiserver, for where kmock answers otherwise."""

    @staticmethod
    def not_found(kind: str, name: str) -> dict[str, Any]:
        return _status(404, "NotFound", f'{kind} "{name}" not found', {"name": name, "kind": kind})

    @staticmethod
    def conflict(kind: str, name: str) -> dict[str, Any]:
        message = (
            f'Operation cannot be fulfilled on {kind} "{name}": the object has been modified;'
            " please apply your changes to the latest version and try again"
        )
        return _status(409, "Conflict", message, {"name": name, "kind": kind})

    @staticmethod
    def forbidden(verb: str, kind: str, name: str, user: str) -> dict[str, Any]:
        message = (
            f'{kind} "{name}" is forbidden: User "{user}" cannot {verb} resource "{kind}"'
            ' in API group "" at the cluster scope'
        )
        return _status(403, "Forbidden", message, {"name": name, "kind": kind})

    @staticmethod
    def pdb_refusal(pdb: str, desired: int, current: int) -> dict[str, Any]:
        # pkg/registry/core/pod/storage/eviction.go: checkAndDecrement, DisruptionsAllowed == 0
        cause = {
            "reason": "DisruptionBudget",
            "message": f"The disruption budget {pdb} needs {desired} healthy pods and has {current} currently",
        }
        message = "Cannot evict pod as it would violate the pod's disruption budget."
        return _status(429, "TooManyRequests", message, {"causes": [cause]})

    @staticmethod
    def several_pdbs() -> dict[str, Any]:
        # eviction.go answers a pod under two budgets with a bare 500 Status (no reason).
        body = _status(
            500, "", "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
        )
        del body["reason"]
        return body

    @staticmethod
    def eviction_accepted() -> dict[str, Any]:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


@dataclass
class KubeStandIn:
    """The emulator as the tests see it: add nodes and pods, end jobs, script PDBs and answers."""

    loop: asyncio.AbstractEventLoop
    emulator: kmock.KubernetesEmulator
    url: str
    refusing: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (ns, pod) -> 429 body

    def _on_loop(self, fn: Callable[[], T]) -> T:
        """Run fn on the emulator's loop: its store is only touched from there."""

        async def call() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout=10)

    def add_node(
        self,
        name: str,
        *,
        unschedulable: bool = False,
        annotations: dict[str, str] | None = None,
        taints: list[dict[str, Any]] | None = None,
        labels: dict[str, str] | None = None,
    ) -> None:
        spec: dict[str, Any] = {"unschedulable": True} if unschedulable else {}
        if taints:
            spec["taints"] = taints
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "resourceVersion": "1",
                "annotations": dict(annotations or {}),
                "labels": dict(labels or {}),
            },
            "spec": spec,
        }
        self._on_loop(lambda: self.emulator.objects.__setitem__((NODES, None, name), node))

    def add_pod(
        self,
        name: str,
        *,
        node: str,
        namespace: str = "ml",
        phase: str = "Running",
        owner_kind: str | None = "Job",
        mirror: bool = False,
        node_selector: dict[str, str] | None = None,
    ) -> None:
        """A pod bound to ``node``; with node="" and phase="Pending", one the scheduler could not place."""
        metadata: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": "1"}
        if owner_kind:
            metadata["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": owner_kind,
                    "name": f"{name}-owner",
                    "uid": f"uid-{name}",
                    "controller": True,
                }
            ]
        if mirror:
            metadata["annotations"] = {"kubernetes.io/config.mirror": "0123456789abcdef"}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "trainer:1"}]},
            "status": {"phase": phase},
        }
        if node_selector:
            pod["spec"]["nodeSelector"] = node_selector
        if not node and phase == "Pending":
            message = "0/4 nodes are available: 4 node(s) were unschedulable."
            pod["status"]["conditions"] = [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
            ]
        self._on_loop(lambda: self.emulator.objects.__setitem__((PODS, namespace, name), pod))

    def end_pod(self, name: str, namespace: str = "ml") -> None:
        """The pod's job ended and the pod is gone."""
        self._on_loop(lambda: self.emulator.objects[PODS, namespace, name].delete())

    def has_pod(self, name: str, namespace: str = "ml") -> bool:
        key = (PODS, namespace, name)
        return self._on_loop(lambda: key in self.emulator.objects and not self.emulator.objects[key].deleted)

    def node(self, name: str) -> dict[str, Any]:
        return self._on_loop(lambda: self.emulator.objects[NODES, None, name].raw)

    def pdb_refuses(self, pod: str, namespace: str = "ml", *, pdb: str = "trainer-pdb") -> None:
        """A PodDisruptionBudget allows no disruption of this pod now: evictions get a 429."""
        self.refusing[namespace, pod] = RECORDED.pdb_refusal(pdb, desired=2, current=2)

    def answer(self, method: str, path: str, body: dict[str, Any], *, times: int | None = None) -> None:
        """Answer `method path` with a recorded Status body (the first `times` requests, or all)."""
        view = self.emulator[method.lower(), path]
        if times is not None:
            view = view[:times]
        # Above the stand-in's own reactions (the eviction one), which come first otherwise.
        view**1 << kmock.Response(status=body["code"], payload=body)

    def requests(self, method: str | None = None, path: str | re.Pattern[str] | None = None) -> list[kmock.Request]:
        """The requests the emulator received, in order (optionally one method and path)."""
        found = self._on_loop(lambda: list(self.emulator))
        if method:
            found = [r for r in found if r.method.value == method.upper()]
        if isinstance(path, str):
            found = [r for r in found if r.url.path == path]
        elif path is not None:
            found = [r for r in found if path.fullmatch(r.url.path)]
        return found

    def events(self, node: str) -> list[dict[str, Any]]:
        """The Events posted about the Node, oldest first."""

        def read() -> list[dict[str, Any]]:
            found = [obj.raw for key, obj in self.emulator.objects.items() if key[0] == EVENTS and not obj.deleted]
            return [e for e in found if e.get("involvedObject", {}).get("name") == node]

        return self._on_loop(read)

    def condition(self, node: str, kind: str) -> dict[str, Any] | None:
        """The node's condition of this type, or None."""
        conditions = self.node(node).get("status", {}).get("conditions", [])
        return next((c for c in conditions if c.get("type") == kind), None)

    def _answer_status(self, request: kmock.Request) -> kmock.Response:
        """The node status subresource: merge the patch's status into the node (runs on the loop)."""
        where = STATUS_PATH.fullmatch(request.url.path)
        assert where is not None
        key = (NODES, None, where["name"])
        if key not in self.emulator.objects:
            return kmock.Response(status=404, payload=RECORDED.not_found("nodes", where["name"]))
        raw = self.emulator.objects[key].raw
        status = _merge(raw.get("status") or {}, json.loads(request.body).get("status") or {})
        self.emulator.objects[key] = {**raw, "status": status}
        return kmock.Response(status=200, payload=self.emulator.objects[key].raw)

    def _answer_eviction(self, request: kmock.Request) -> kmock.Response:
        """The eviction subresource: delete the pod, unless a "PDB" refuses (runs on the loop)."""
        where = EVICTION_PATH.fullmatch(request.url.path)
        assert where is not None
        namespace, name = where["namespace"], where["name"]
        refusal = self.refusing.get((namespace, name))
        if refusal is not None:
            return kmock.Response(status=429, payload=refusal)
        key = (PODS, namespace, name)
        if key not in self.emulator.objects or self.emulator.objects[key].deleted:
            return kmock.Response(status=404, payload=RECORDED.not_found("pods", name))
        self.emulator.objects[key].delete()
        return kmock.Response(status=201, payload=RECORDED.eviction_accepted())


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge(merged.get(key), value)
    return merged


@contextlib.contextmanager
def running_stand_in() -> Iterator[KubeStandIn]:
    """Start the emulator and its HTTP server on a loop in a background thread; stop both after."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="kmock-loop", daemon=True)
    thread.start()
    stack = contextlib.AsyncExitStack()

    async def start() -> KubeStandIn:
        emulator = await stack.enter_async_context(kmock.KubernetesEmulator())
        server = await stack.enter_async_context(kmock.Server(emulator))
        stand_in = KubeStandIn(loop=loop, emulator=emulator, url=str(server.url).rstrip("/"))
        emulator["post", EVICTION_PATH] << stand_in._answer_eviction
        emulator["patch", STATUS_PATH] << stand_in._answer_status
        # Declared, so that lists answer [] (not kmock's 404) while no pod exists yet.
        emulator.resources[PODS] = {}
        emulator.resources[NODES] = {}
        emulator.resources[EVENTS] = {}
        return stand_in

    try:
        yield asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    finally:
        asyncio.run_coroutine_threadsafe(stack.aclose(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


@pytest.fixture(name="kube")
def kube_fixture() -> Iterator[KubeStandIn]:
    """A fresh stand-in API server for one test."""
    with running_stand_in() as stand_in:
        yield stand_in
