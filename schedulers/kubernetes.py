"""Kubernetes: cordon, drain and evict nodes through the API server, with the official client.

Nodewarden's cordon is three marks on the Node, so that anyone can see whose it is:
``spec.unschedulable``, the taint ``nodewarden.io/maintenance=<short reason>:NoSchedule`` and the
annotations ``nodewarden.io/cordoned-by=nodewarden`` + ``nodewarden.io/cordon-reason``. A node
made unschedulable by anyone else (``kubectl cordon``, an autoscaler, a reboot daemon) is theirs:
Nodewarden neither writes over it nor lifts it.

An active check's hold is the same cordon with a cordon-reason that starts with "active check"
(``schedulers.base.CHECK_HOLD``). A later cordon of ours with another reason (the lifecycle's)
rewrites the annotation and so takes the cordon over; the check's release then leaves it.

Work on a node = its pods that are not DaemonSet pods, not mirror (static) pods and not finished.
``drain`` only cordons (current work finishes by itself); ``evict`` also asks the API to evict
each pod (policy/v1 Eviction, so PodDisruptionBudgets are honoured).

Every write re-reads the node and sends its ``resourceVersion`` (compare-and-swap): a 409 from a
concurrent writer is retried on a fresh read, as client-go's ``RetryOnConflict`` does.

Fencing GPUs (``fence_gpus``): the indices go in the annotation ``nodewarden.io/fenced-gpus``
("2,5", the record) and the node's ``status.allocatable["nvidia.com/gpu"]`` is lowered to the
capacity less the fenced count, through the status subresource, so the scheduler places no more
GPU requests than the healthy GPUs. The kubelet owns that status: it rewrites allocatable from
its device plugin (on a device-plugin or kubelet restart, and at its status updates), so the
annotation is what says the fence and ``fence_gpus`` is idempotent, to be applied again. A node
without ``nvidia.com/gpu`` capacity answers False (the caller drains it). The count does not tell
the kubelet which device: the device plugin's own health check is what keeps the named GPU from
a new pod.

Credentials: ``settings.NODEWARDEN_KUBERNETES_TOKENS`` maps cluster name -> bearer token; the API
server URL is ``Cluster.scheduler_endpoint``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

import urllib3
from django.conf import settings
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils.retry import retry_on_conflict

from .base import (
    CHECK_HOLD,
    OWNER,
    DrainState,
    SchedulerAdapter,
    SchedulerConflict,
    SchedulerError,
    check_hold_reason,
)
from .conditions import CONDITION_NAME as CONDITION

T = TypeVar("T")

TAINT_KEY = "nodewarden.io/maintenance"
OWNER_ANNOTATION = "nodewarden.io/cordoned-by"
REASON_ANNOTATION = "nodewarden.io/cordon-reason"
FENCED_GPUS_ANNOTATION = "nodewarden.io/fenced-gpus"  # "2,5": the GPU indices Nodewarden fenced
GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's extended resource
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"  # static pods: the kubelet runs them from files
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
SOMEONE_ELSE = "someone else"  # the owner of a cordon that names none
POOL_SIZE = 8  # concurrent API calls for a batch of nodes (apply_many): the API server's rate limits stay far
REQUEST_TIMEOUT = (5.0, 30.0)  # seconds: connect, read; every call carries it
# The client's default for a dict body is a strategic merge. A JSON merge patch does the same to a
# node (taints have no merge key, so both replace the whole list; annotations merge, null deletes)
# and is the only kind the test stand-in (kmock) understands.
MERGE_PATCH = "application/merge-patch+json"
TAINT_VALUE_MAX = 63  # a taint value is a label value: 63 chars of [A-Za-z0-9._-], alnum at both ends
REASON_MAX = 1024
PENDING_PODS_READ = 500  # pending pods one wants_node question reads
PODS_NAMED_MAX = 5  # how many leftover pods drain_state's detail names
EVENT_NAMESPACE = "default"  # where the kubelet and node-problem-detector post a Node's Events


class KubernetesApiError(SchedulerError):
    """The API server answered with an error; `status` and its `answer` are kept for callers."""

    def __init__(self, message: str, *, status: int, answer: str) -> None:
        super().__init__(message)
        self.status = status
        self.answer = answer


class KubernetesAdapter(SchedulerAdapter):
    """One Kubernetes cluster, reached at ``cluster.scheduler_endpoint``."""

    kind = "kubernetes"

    def __init__(self, cluster: Any) -> None:
        super().__init__(cluster)
        self._api: client.CoreV1Api | None = None
        # Pods a PodDisruptionBudget kept on the node at this adapter's last evict (node -> lines).
        self._refused: dict[str, list[str]] = {}

    # --- the verbs ---------------------------------------------------------------------------

    def is_running_work(self, node: Any) -> bool:
        name = self.node_name(node)
        self._read_node(name)  # a node the cluster does not know is an error, not an idle node
        return bool(self._work_pods(name))

    def cordon(self, node: Any, *, reason: str) -> None:
        name = self.node_name(node)
        retry_on_conflict(lambda: self._cordon_once(name, reason))

    def drain(self, node: Any, *, reason: str) -> None:
        """Cordon only: the node is drained once its current work has ended (see drain_state)."""
        self.cordon(node, reason=reason)

    def evict(self, node: Any, *, reason: str) -> None:
        """Cordon, then evict each pod; a PDB's refusal (429) is kept for drain_state, not raised."""
        self.cordon(node, reason=reason)
        name = self.node_name(node)
        refused = []
        for pod in self._work_pods(name):
            if _meta(pod).deletion_timestamp is not None:
                continue  # already terminating: another eviction changes nothing
            refusal = self._evict_pod(name, pod)
            if refusal:
                refused.append(refusal)
        self._refused[name] = refused

    def apply_many(self, reaction: str, items: Sequence[tuple[Any, str]]) -> dict[int, SchedulerError | None]:
        """Kubernetes has no many-node write: the nodes are asked concurrently (``POOL_SIZE`` at a
        time) over this adapter's one API client, so its connection pool serves the whole batch."""
        if len(items) < 2:
            return super().apply_many(reaction, items)
        try:
            self.core  # noqa: B018 - one client, built before the threads share it
        except SchedulerError as exc:  # no URL or token: the same answer for every node
            return {node.pk: exc for node, _reason in items}
        with ThreadPoolExecutor(max_workers=min(POOL_SIZE, len(items))) as pool:
            parts = list(pool.map(lambda item: super(KubernetesAdapter, self).apply_many(reaction, [item]), items))
        return {pk: outcome for part in parts for pk, outcome in part.items()}

    def uncordon(self, node: Any, *, reason: str) -> None:
        name = self.node_name(node)
        retry_on_conflict(lambda: self._uncordon_once(name))
        self._refused.pop(name, None)

    def work_summary(self, node: Any) -> str:
        name = self.node_name(node)
        self._read_node(name)  # a node the cluster does not know is an error, not an idle node
        pods = self._work_pods(name)
        if not pods:
            return ""
        named = ", ".join(f"{_meta(pod).namespace}/{_meta(pod).name}" for pod in pods[:PODS_NAMED_MAX])
        more = f" and {len(pods) - PODS_NAMED_MAX} more" if len(pods) > PODS_NAMED_MAX else ""
        return f"{len(pods)} work pod(s) on {name}: {named}{more}"

    def wants_node(self, node: Any) -> str | None:
        """A pending pod the scheduler could not place that would fit the node's labels, or None.

        Kept simple: an unscheduled pod (phase Pending, no node, ``PodScheduled=False`` with reason
        Unschedulable) whose ``nodeSelector`` the node's labels satisfy. Affinity, resources and
        tolerations are not weighed: a pod waiting for capacity in the node's pool takes the node back.
        """
        name = self.node_name(node)
        labels = _meta(self._read_node(name)).labels or {}
        pods = self._call(
            "list_pod_for_all_namespaces",
            name,
            lambda **kw: self.core.list_pod_for_all_namespaces(
                field_selector="status.phase=Pending,spec.nodeName=", limit=PENDING_PODS_READ, **kw
            ),
        )
        for pod in pods.items:
            selector = (pod.spec.node_selector if pod.spec is not None else None) or {}
            if _unschedulable(pod) and all(labels.get(key) == value for key, value in selector.items()):
                return f"pod {_meta(pod).namespace}/{_meta(pod).name} is pending: {_unschedulable(pod)}"
        return None

    def hold_for_check(self, node: Any, *, reason: str) -> bool:
        """Cordon + taint + owner annotation, the reason starting "active check"; an existing
        cordon is left as it is (True only when it is already a check's hold)."""
        name = self.node_name(node)
        return retry_on_conflict(lambda: self._hold_once(name, check_hold_reason(reason)))

    def release_check_hold(self, node: Any, *, reason: str) -> bool:
        """Uncordon only while the cordon is still a check's hold of ours."""
        name = self.node_name(node)
        released = retry_on_conflict(lambda: self._release_once(name))
        if released:
            self._refused.pop(name, None)
        return released

    def drain_state(self, node: Any) -> DrainState:
        name = self.node_name(node)
        current = self._read_node(name)
        pods = self._work_pods(name)
        cordoned = bool(current.spec and current.spec.unschedulable)
        owner = (_owner(current) or SOMEONE_ELSE) if cordoned else None
        return DrainState(
            cordoned=cordoned,
            drained=cordoned and not pods,
            running_jobs=len(pods),
            owner=owner,
            detail=self._detail(name, current, pods, owner),
        )

    def fence_gpus(self, node: Any, indices: list[int], *, reason: str) -> bool:
        """Record the fenced indices in our annotation and lower allocatable GPUs to match."""
        name = self.node_name(node)
        return retry_on_conflict(lambda: self._set_fenced(name, set(indices), add=True))

    def unfence_gpus(self, node: Any, indices: list[int], *, reason: str) -> bool:
        """Drop the indices from our annotation and raise allocatable GPUs to match."""
        name = self.node_name(node)
        return retry_on_conflict(lambda: self._set_fenced(name, set(indices), add=False))

    def _set_fenced(self, name: str, indices: set[int], *, add: bool) -> bool:
        current = self._read_node(name)
        capacity = int(((current.status and current.status.capacity) or {}).get(GPU_RESOURCE, "0") or 0)
        recorded = _fenced_gpus(current)
        fenced = recorded | indices if add else recorded - indices
        if not capacity or any(index >= capacity for index in fenced):
            return not add  # no GPUs known to Kubernetes: nothing to fence, nothing to give back
        allocatable = str(capacity - len(fenced))
        now = (current.status and current.status.allocatable) or {}
        if fenced == recorded and now.get(GPU_RESOURCE) == allocatable:
            return True  # in place already: the minute's re-apply writes nothing
        value = ",".join(map(str, sorted(fenced))) or None  # null deletes the annotation
        if fenced != recorded:
            self._patch_node(
                name,
                {
                    "metadata": {
                        "resourceVersion": _meta(current).resource_version,
                        "annotations": {FENCED_GPUS_ANNOTATION: value},
                    }
                },
            )
        status = {"status": {"allocatable": {GPU_RESOURCE: allocatable}}}
        self._call(
            "patch_node_status",
            name,
            lambda **kw: self.core.patch_node_status(name, status, _content_type=MERGE_PATCH, **kw),
        )
        return True

    # --- the node's health, as node-problem-detector shows it ------------------------------------

    reports_health = True

    def report_health(self, node: Any, report: Any) -> None:
        """Labels, the ``NodewardenHealthy`` condition (through the status subresource) and an Event.

        The condition is written as node-problem-detector writes its own: the whole conditions list
        sent back with the read's ``resourceVersion`` (a JSON merge patch replaces a list; the kubelet's
        own conditions are kept and a concurrent write of theirs is a 409, retried on a fresh read).
        Nothing is written when the node shows this already (``lastTransitionTime`` moves only when
        the status flips)."""
        name = self.node_name(node)
        retry_on_conflict(lambda: self._label_once(name, report.labels))
        retry_on_conflict(lambda: self._condition_once(name, report))
        if report.event is not None:
            self._post_event(name, report.event)

    def _label_once(self, name: str, labels: dict[str, str | None]) -> None:
        current = self._read_node(name)
        now = _meta(current).labels or {}
        changed = {key: value for key, value in labels.items() if now.get(key) != value}
        if not changed:
            return
        patch = {"metadata": {"resourceVersion": _meta(current).resource_version, "labels": changed}}
        self._patch_node(name, patch)

    def _condition_once(self, name: str, report: Any) -> None:
        current = self._read_node(name)
        conditions = [
            self.core.api_client.sanitize_for_serialization(condition)
            for condition in (current.status and current.status.conditions) or []
        ]
        ours = next((c for c in conditions if c.get("type") == CONDITION), None)
        status = "True" if report.healthy else "False"
        if ours and (ours.get("status"), ours.get("reason"), ours.get("message")) == (
            status,
            report.reason,
            report.message,
        ):
            return  # shown already: no write, and lastTransitionTime stays
        now = _rfc3339()
        changed = not ours or ours.get("status") != status
        condition = {
            "type": CONDITION,
            "status": status,
            "reason": report.reason,
            "message": report.message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now if changed else _kept_transition_time(current) or now,
        }
        others = [c for c in conditions if c.get("type") != CONDITION]
        patch = {
            "metadata": {"resourceVersion": _meta(current).resource_version},
            "status": {"conditions": [*others, condition]},
        }
        self._call(
            "patch_node_status",
            name,
            lambda **kw: self.core.patch_node_status(name, patch, _content_type=MERGE_PATCH, **kw),
        )

    def _post_event(self, name: str, note: Any) -> None:
        """A core/v1 Event on the Node, in namespace default, as the kubelet and NPD post theirs."""
        now = _rfc3339()
        body: Any = {  # a dict as the API spells it; the client sends it as it is
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": EVENT_NAMESPACE},
            # The kubelet names its node by name in uid too: kubectl describe node finds them so.
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": name, "uid": name},
            "reason": note.reason,
            "message": " ".join(note.message.split())[:REASON_MAX],
            "type": "Warning" if note.warning else "Normal",
            "source": {"component": OWNER},
            "reportingComponent": OWNER,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._call(
            "create_namespaced_event",
            name,
            lambda **kw: self.core.create_namespaced_event(EVENT_NAMESPACE, body, **kw),
        )

    # --- cordon and uncordon, one attempt each (retried on 409) ------------------------------

    def _cordon_once(self, name: str, reason: str, current: client.V1Node | None = None) -> None:
        current = current or self._read_node(name)
        unschedulable = bool(current.spec and current.spec.unschedulable)
        if unschedulable and _owner(current) != OWNER:
            return  # someone else's cordon keeps work off already, and it stays theirs
        reason = reason.strip()[:REASON_MAX] or "maintenance"
        ours = {"key": TAINT_KEY, "value": _taint_value(reason), "effect": "NoSchedule"}
        taints = self._taints(current)
        annotations = _annotations(current)
        if unschedulable and ours in taints and annotations.get(REASON_ANNOTATION) == reason:
            return  # already cordoned by us for this reason
        others = [taint for taint in taints if taint.get("key") != TAINT_KEY]
        self._patch_node(
            name,
            {
                "metadata": {
                    "resourceVersion": _meta(current).resource_version,
                    "annotations": {OWNER_ANNOTATION: OWNER, REASON_ANNOTATION: reason},
                },
                "spec": {"unschedulable": True, "taints": [*others, ours]},
            },
        )

    def _hold_once(self, name: str, reason: str) -> bool:
        current = self._read_node(name)
        if current.spec and current.spec.unschedulable:
            return _check_hold(current)
        self._cordon_once(name, reason, current)  # the read's resourceVersion: a concurrent cordon wins
        return True

    def _release_once(self, name: str) -> bool:
        current = self._read_node(name)
        if not (current.spec and current.spec.unschedulable):
            return True
        if not _check_hold(current):
            return False
        self._uncordon_once(name, current)  # sent with this read's resourceVersion: a takeover wins
        return True

    def _uncordon_once(self, name: str, current: client.V1Node | None = None) -> None:
        current = current or self._read_node(name)
        owner = _owner(current)
        if owner != OWNER:
            if current.spec and current.spec.unschedulable:
                by = f"{owner} ({OWNER_ANNOTATION}={owner})" if owner else f"{SOMEONE_ELSE} (no {OWNER_ANNOTATION})"
                raise SchedulerConflict(
                    f"node {name} in Kubernetes cluster {self.cluster.name} is cordoned by {by}: "
                    "Nodewarden leaves it cordoned"
                )
            return  # not cordoned: nothing to lift
        others = [taint for taint in self._taints(current) if taint.get("key") != TAINT_KEY]
        self._patch_node(
            name,
            {
                "metadata": {
                    "resourceVersion": _meta(current).resource_version,
                    "annotations": {OWNER_ANNOTATION: None, REASON_ANNOTATION: None},
                },
                "spec": {"unschedulable": False, "taints": others or None},
            },
        )

    # --- pods ---------------------------------------------------------------------------------

    def _work_pods(self, name: str) -> list[client.V1Pod]:
        pods = self._call(
            "list_pod_for_all_namespaces",
            name,
            lambda **kw: self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}", **kw),
        )
        return [pod for pod in pods.items if _is_work(pod, name)]

    def _evict_pod(self, name: str, pod: client.V1Pod) -> str | None:
        """Ask for one pod's eviction; a PDB's refusal comes back as a line for drain_state."""
        pod_name, namespace = _meta(pod).name, _meta(pod).namespace
        if pod_name is None or namespace is None:
            raise SchedulerError(f"{name}: the API server listed a pod without a name or namespace")
        eviction = client.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=client.V1ObjectMeta(name=pod_name, namespace=namespace),
        )
        try:
            # A real API server answers 201 with a Status, which the client reads into an
            # Eviction leniently; _preload_content=False would skip its error checks too.
            self._call(
                "create_namespaced_pod_eviction",
                f"{name} (pod {namespace}/{pod_name})",
                lambda **kw: self.core.create_namespaced_pod_eviction(pod_name, namespace, eviction, **kw),
            )
        except KubernetesApiError as exc:
            if exc.status == 429:  # a PodDisruptionBudget allows no disruption now: retry later
                return f"{namespace}/{pod_name}: {exc.answer}"
            if exc.status == 404:
                return None  # the pod ended meanwhile
            raise
        return None

    # --- node reads and writes ----------------------------------------------------------------

    def _read_node(self, name: str) -> client.V1Node:
        return self._call("read_node", name, lambda **kw: self.core.read_node(name, **kw))

    def _patch_node(self, name: str, patch: dict[str, Any]) -> None:
        self._call("patch_node", name, lambda **kw: self.core.patch_node(name, patch, _content_type=MERGE_PATCH, **kw))

    def _taints(self, node: client.V1Node) -> list[dict[str, Any]]:
        """The node's taints as the API spells them (camelCase, RFC 3339 times), to send back."""
        taints = (node.spec and node.spec.taints) or []
        return [self.core.api_client.sanitize_for_serialization(taint) for taint in taints]

    def _detail(self, name: str, node: client.V1Node, pods: list[client.V1Pod], owner: str | None) -> str:
        if owner is None:
            parts = ["schedulable"]
        elif owner == OWNER:
            parts = [f"cordoned by {OWNER}: {_annotations(node).get(REASON_ANNOTATION, '')}"]
        else:
            parts = [f"cordoned by {owner}"]
        if pods:
            named = ", ".join(f"{_meta(pod).namespace}/{_meta(pod).name}" for pod in pods[:PODS_NAMED_MAX])
            more = f" and {len(pods) - PODS_NAMED_MAX} more" if len(pods) > PODS_NAMED_MAX else ""
            parts.append(f"{len(pods)} pod(s) left: {named}{more}")
        else:
            parts.append("no work pods left")
        if self._refused.get(name):
            parts.append("eviction refused by a PodDisruptionBudget: " + "; ".join(self._refused[name]))
        return "; ".join(parts)

    # --- the API client -------------------------------------------------------------------------

    @property
    def core(self) -> client.CoreV1Api:
        """CoreV1Api for this cluster (nodes, pods, and pods' eviction subresource)."""
        if self._api is None:
            self._api = client.CoreV1Api(client.ApiClient(self._configuration()))
        return self._api

    def _configuration(self) -> client.Configuration:
        cluster = self.cluster.name
        endpoint = (self.cluster.scheduler_endpoint or "").strip().rstrip("/")
        if not endpoint:
            raise SchedulerError(f"Kubernetes cluster {cluster} has no API server URL (scheduler_endpoint)")
        token = settings.NODEWARDEN_KUBERNETES_TOKENS.get(cluster)
        if not token:
            raise SchedulerError(f"no bearer token for Kubernetes cluster {cluster} in NODEWARDEN_KUBERNETES_TOKENS")
        configuration = client.Configuration(
            host=endpoint, api_key={"BearerToken": token}, api_key_prefix={"BearerToken": "Bearer"}
        )
        configuration.retries = 1  # one retry on a dropped connection, so a dead server fails fast
        return configuration

    def _call(self, call: str, name: str, fn: Callable[..., T]) -> T:
        """One API call with our timeout; a failure becomes a SchedulerError naming call and node."""
        try:
            return fn(_request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            raise self._api_error(call, name, exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:  # refused, timed out, TLS
            raise SchedulerError(
                f"Kubernetes {call} for node {name}: cluster {self.cluster.name} "
                f"({self.cluster.scheduler_endpoint}) did not answer: {exc}"
            ) from exc

    def _api_error(self, call: str, name: str, exc: ApiException) -> KubernetesApiError:
        status = int(exc.status or 0)
        answer = _answer(exc)
        if status == 404 and call in ("read_node", "patch_node"):
            message = f"no node {name} in Kubernetes cluster {self.cluster.name} ({call}: {answer})"
        else:
            message = f"Kubernetes {call} for node {name} in cluster {self.cluster.name}: HTTP {status} {answer}"
        return KubernetesApiError(message, status=status, answer=answer)


def _meta(obj: client.V1Pod | client.V1Node) -> client.V1ObjectMeta:
    """An object's metadata: the API server always sends it (the client's models call it optional)."""
    if obj.metadata is None:
        raise SchedulerError(f"the API server sent a {type(obj).__name__} without metadata")
    return obj.metadata


def _annotations(node: client.V1Node) -> dict[str, str]:
    return dict(node.metadata.annotations or {}) if node.metadata else {}


def _fenced_gpus(node: client.V1Node) -> set[int]:
    """The GPU indices our annotation records as fenced (a malformed entry is ignored)."""
    words = _annotations(node).get(FENCED_GPUS_ANNOTATION, "").split(",")
    return {int(word) for word in words if word.strip().isdigit()}


def _owner(node: client.V1Node) -> str | None:
    return _annotations(node).get(OWNER_ANNOTATION) or None


def _check_hold(node: client.V1Node) -> bool:
    """Cordoned by us for an active check, and not taken over since."""
    return _owner(node) == OWNER and _annotations(node).get(REASON_ANNOTATION, "").startswith(CHECK_HOLD)


def _is_work(pod: client.V1Pod, name: str) -> bool:
    """Customer work: not a DaemonSet or mirror pod, not finished, on this node."""
    # The server filters by spec.nodeName already; checked again because a proxy or the test
    # stand-in may ignore field selectors, and counting another node's pods would block a drain.
    if pod.spec is None or pod.spec.node_name != name:
        return False
    if pod.status is not None and pod.status.phase in FINISHED_PHASES:
        return False
    if MIRROR_ANNOTATION in (_meta(pod).annotations or {}):
        return False
    return not any(ref.kind == "DaemonSet" for ref in _meta(pod).owner_references or [])


def _unschedulable(pod: client.V1Pod) -> str:
    """The scheduler's message when it could not place this pending pod; "" for any other pod."""
    # Re-checked here: the field selector may be ignored (a proxy, the test stand-in).
    if pod.spec is None or pod.spec.node_name or pod.status is None or pod.status.phase != "Pending":
        return ""
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False" and condition.reason == "Unschedulable":
            return condition.message or "Unschedulable"
    return ""


def _taint_value(reason: str) -> str:
    """A short, valid taint value from a free-text reason (the annotation keeps it whole)."""
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", reason)[:TAINT_VALUE_MAX]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def _kept_transition_time(node: client.V1Node) -> str | None:
    """Our condition's lastTransitionTime as the API spells it (the client reads it into a datetime)."""
    for condition in (node.status and node.status.conditions) or []:
        if condition.type == CONDITION and condition.last_transition_time:
            return _rfc3339(condition.last_transition_time)
    return None


def _rfc3339(when: datetime | None = None) -> str:
    """A time (now by default) as the API spells times (seconds, Z)."""
    return (when or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _answer(exc: ApiException) -> str:
    """The API's own words: a Status body's reason, message and causes, or the raw answer."""
    body = exc.body.decode(errors="replace") if isinstance(exc.body, bytes) else (exc.body or "")
    try:
        status = json.loads(body)
    except ValueError:
        return (body.strip() or str(exc.reason or "no answer"))[:500]
    if not isinstance(status, dict) or status.get("kind") != "Status":
        return body.strip()[:500]
    causes = [cause.get("message", "") for cause in (status.get("details") or {}).get("causes") or []]
    words = " ".join(part for part in (status.get("reason"), status.get("message")) if part)
    return words + (f" ({'; '.join(causes)})" if causes else "")
