"""REST endpoints of Day 0: the agent's join, and the operator's provision request.

``POST /api/agent/join/`` is a plain Django view like the agents' report ingest: the
agent has no credential yet but its join token, and needs none of DRF's machinery.
Every refusal is a 4xx with ``{"error", "detail"}``, never a 500.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django_fsm import ConcurrentTransition, TransitionNotAllowed
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, generics, status
from rest_framework.request import Request
from rest_framework.response import Response

from nodes.api.serializers import DetailSerializer, ReasonErrorSerializer
from nodes.models import OPERATE, Node
from nodes.scoping import visible_node_or_404
from nodes.services import Actor
from nodewarden.api import check_json_depth, error_body
from nodewarden.throttling import AuthFailureThrottle, too_many_failures_response

from .. import cloudinit, services
from . import serializers

MAX_JOIN_BODY_BYTES = 64 * 1024
MAX_HOSTNAME_LENGTH = 253
# The join request and answer as the OpenAPI document shows them (nodewarden/openapi.py): kept
# beside _join_request, which checks exactly these (the facts' size is checked by services.join).
JOIN_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["join_token", "hostname"],
    "properties": {
        "join_token": {"type": "string", "minLength": 1, "description": "The single-use nwj_... token."},
        "hostname": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_HOSTNAME_LENGTH,
            "description": "Must be the node's hostname the token was issued for.",
        },
        "facts": {
            "type": ["object", "null"],
            "description": "What the agent found (GPUs, serials, ...), kept "
            f"as the node's agent facts; at most {services.MAX_FACTS_BYTES} bytes of JSON.",
        },
    },
}
JOIN_RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["node_token", "hostname", "node_id"],
    "properties": {
        "node_token": {"type": "string", "description": "The node's nwa_... agent token, shown only here."},
        "hostname": {"type": "string"},
        "node_id": {"type": "integer"},
    },
}


def _refuse(status_code: int, error: str, detail: str) -> JsonResponse:
    return JsonResponse(error_body(detail, error.replace(" ", "_"), error=error), status=status_code)


class _BadJoin(ValueError):
    """The request body is not a join request."""


def _join_request(request: HttpRequest) -> tuple[str, str, Any]:
    try:
        check_json_depth(request.body)  # before decoding: json.loads recurses until RecursionError
        body = json.loads(request.body)
    except (ValueError, UnicodeDecodeError, exceptions.ParseError) as exc:
        raise _BadJoin(f"The body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise _BadJoin('Send a JSON object: {"join_token": ..., "hostname": ..., "facts": {...}}.')
    token, hostname = body.get("join_token"), body.get("hostname")
    if not isinstance(token, str) or not token:
        raise _BadJoin("join_token: required, a string (nwj_...).")
    if not isinstance(hostname, str) or not 0 < len(hostname) <= MAX_HOSTNAME_LENGTH:
        raise _BadJoin(f"hostname: required, a string of 1 to {MAX_HOSTNAME_LENGTH} characters.")
    return token, hostname, body.get("facts")


@csrf_exempt  # the join token in the body is the credential, never a cookie
def agent_join(request: HttpRequest) -> JsonResponse:
    """POST /api/agent/join/: trade a single-use join token for the node's agent token."""
    if request.method != "POST":
        return _refuse(405, "method not allowed", "POST a join request.")
    length = request.headers.get("Content-Length") or "0"
    if length.isdigit() and int(length) > MAX_JOIN_BODY_BYTES:
        return _refuse(413, "body too large", f"A join request is at most {MAX_JOIN_BODY_BYTES} bytes.")
    throttle = AuthFailureThrottle()  # join tokens are guessed like any other (nodewarden.throttling)
    if throttle.locked_out(request):
        return too_many_failures_response(throttle)
    try:
        token, hostname, facts = _join_request(request)
        result = services.join(token, hostname=hostname, agent_facts=facts)
    except services.UnknownJoinToken as exc:
        throttle.record_failure(request)
        return _refuse(exc.status, exc.error, str(exc))
    except _BadJoin as exc:
        return _refuse(400, "invalid join", str(exc))
    except ValidationError as exc:
        return _refuse(400, "invalid join", "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items()))
    except services.JoinRefused as exc:
        return _refuse(exc.status, exc.error, str(exc))
    except (TransitionNotAllowed, ConcurrentTransition) as exc:  # the node moved on while joining
        return _refuse(409, "node not initializing", str(exc))
    response = JsonResponse(
        {"node_token": result.agent_token, "hostname": result.hostname, "node_id": result.node_id}, status=201
    )
    response["Cache-Control"] = "no-store"
    return response


class NodeProvisionView(generics.GenericAPIView[Node]):
    """Prepare a node's Day 0 boot: boot config, NoCloud seed, a fresh single-use join token."""

    serializer_class = serializers.ProvisionSerializer
    queryset = Node.objects.none()  # the node comes from nodes.scoping, per request

    @extend_schema(
        summary="Provision a node (Day 0)",
        description="Creates or updates the node's boot config, revokes its unused join tokens, issues a new "
        "one and moves an enrolled node to initializing (an initializing node is re-provisioned). "
        "Boot the node with kernel_cmdline; the join token is shown in this answer only.",
        request=serializers.ProvisionSerializer,
        responses={
            201: serializers.ProvisionResultSerializer,
            400: OpenApiResponse(
                ReasonErrorSerializer, description="No reason, or a bad boot config field (each named)."
            ),
            403: OpenApiResponse(DetailSerializer, description="The user may not provision nodes."),
            404: OpenApiResponse(DetailSerializer, description="No such node visible to the user."),
            409: OpenApiResponse(DetailSerializer, description="The node is neither enrolled nor initializing."),
        },
    )
    def post(self, request: Request, pk: int) -> Response:
        node = visible_node_or_404(request.user, pk)
        if not request.user.has_perm(OPERATE):
            raise exceptions.PermissionDenied("You may not provision nodes.")
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        fields = dict(body.validated_data)
        reason = fields.pop("reason")
        try:
            boot, join_token = services.prepare_boot(
                node.pk, actor=Actor(user=request.user), reason=reason, boot_config=fields
            )
        except ObjectDoesNotExist as exc:  # deleted between the lookup and the row lock
            raise exceptions.NotFound() from exc
        token = cloudinit.current_join_token(boot)
        assert token is not None  # noqa: S101 - prepare_boot just issued it
        result = {
            "node": Node.objects.get(pk=node.pk),
            "boot_config": boot,
            "seed_url": cloudinit.seed_url(boot),
            "kernel_cmdline": cloudinit.kernel_cmdline(boot),
            "instance_id": cloudinit.instance_id(boot),
            "join_token": join_token,
            "join_token_prefix": token.prefix,
            "join_token_expires_at": token.expires_at,
            "kubernetes_bootstrap_token": token.kubeadm_token() or None,
        }
        response = Response(serializers.ProvisionResultSerializer(result).data, status=status.HTTP_201_CREATED)
        response["Cache-Control"] = "no-store"
        return response
