"""REST endpoints of the event feed: the cursor API over node events, webhook subscriptions
(subscribe, list, deactivate) and their dead letters (list, redeliver). Customers see and
subscribe to their own tenant's events only; another tenant's subscription answers 404."""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from nodes.api.serializers import DetailSerializer
from nodes.permissions import CanOperateOrOwnTenant
from nodes.scoping import visible_events, visible_tenants

from .. import events as feed
from .. import services
from ..models import DeadLetter, Subscription
from ..scoping import visible_dead_letters, visible_subscriptions
from . import serializers

BAD = OpenApiResponse(DetailSerializer, description="A malformed or unknown parameter, each named.")
FORBIDDEN = OpenApiResponse(DetailSerializer, description="The user may not manage subscriptions, or not this tenant.")
NOT_FOUND = OpenApiResponse(DetailSerializer, description="No such record visible to the user.")


class EventsView(APIView):
    """Node events past a cursor, oldest first, as CloudEvents: follow the feed without polling pages.

    Pages stop at the settled horizon (feeds.events): an event whose transaction is still open is
    never skipped by a cursor that passed it. Unknown parameters are refused (400): a misspelt
    filter would otherwise page through everything.
    """

    @extend_schema(
        summary="Node events after a cursor, as CloudEvents",
        parameters=[serializers.EventQuerySerializer],
        responses={200: serializers.EventPageSerializer, 400: BAD},
    )
    def get(self, request: Request) -> Response:
        unknown = sorted(set(request.query_params) - set(serializers.EventQuerySerializer().fields))
        if unknown:
            raise exceptions.ValidationError({name: ["Unknown parameter."] for name in unknown})
        query = serializers.EventQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        if data.get("tenant") and not visible_tenants(request.user).filter(slug=data["tenant"]).exists():
            raise exceptions.ValidationError({"tenant": ["No such tenant."]})  # another's: as unknown
        up_to = feed.advance_horizon()
        events = visible_events(request.user).filter(pk__gt=data["after"], pk__lte=up_to)
        if "type" in data:
            events = events.filter(kind=feed.kind_of(data["type"]))
        if "cluster" in data:
            events = events.filter(node__cluster__name=data["cluster"])
        if "tenant" in data:
            events = events.filter(node__tenant__slug=data["tenant"])
        if "node" in data:
            events = events.filter(node_id=data["node"])
        page = list(feed.for_feed(events)[: data["limit"]])
        # A short page holds every match up to the horizon: the next one starts there.
        next_cursor = page[-1].pk if len(page) == data["limit"] else max(up_to, data["after"])
        body = {"events": [feed.cloudevent(e) for e in page], "next_cursor": next_cursor}
        return Response(serializers.EventPageSerializer(body).data)


@extend_schema_view(
    list=extend_schema(summary="List webhook subscriptions to node events"),
    retrieve=extend_schema(summary="One webhook subscription"),
)
class SubscriptionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[Subscription]):
    """Webhook subscriptions: CloudEvents of node events, signed, filtered by tenant, cluster and type."""

    serializer_class = serializers.SubscriptionSerializer
    permission_classes = [permissions.IsAuthenticated, CanOperateOrOwnTenant]

    def get_queryset(self) -> QuerySet[Subscription]:
        # tenant, cluster: one join for the page (their slug and name are listed).
        return visible_subscriptions(self.request.user).select_related("tenant", "cluster").order_by("id")

    @extend_schema(
        summary="Subscribe a webhook to node events",
        request=serializers.SubscribeSerializer,
        responses={201: serializers.CreatedSubscriptionSerializer, 400: BAD, 403: FORBIDDEN},
    )
    def create(self, request: Request) -> Response:
        body = serializers.SubscribeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        subscription = services.subscribe(request.user, **body.validated_data)
        return Response(serializers.CreatedSubscriptionSerializer(subscription).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Deactivate a webhook subscription",
        request=None,
        responses={200: serializers.SubscriptionSerializer, 403: FORBIDDEN, 404: NOT_FOUND},
    )
    @action(detail=True, methods=["post"], filter_backends=[])
    def deactivate(self, request: Request, pk: str | None = None) -> Response:
        subscription = services.deactivate(self.get_object())
        return Response(serializers.SubscriptionSerializer(subscription).data)


@extend_schema_view(
    list=extend_schema(summary="List events a webhook could not deliver (dead letters)"),
    retrieve=extend_schema(summary="One dead letter"),
)
class DeadLetterViewSet(viewsets.ReadOnlyModelViewSet[DeadLetter]):
    """Events given up after NODEWARDEN_FEED_MAX_ATTEMPTS failures, newest first, with the last error."""

    serializer_class = serializers.DeadLetterSerializer
    permission_classes = [permissions.IsAuthenticated, CanOperateOrOwnTenant]

    def get_queryset(self) -> QuerySet[DeadLetter]:
        return visible_dead_letters(self.request.user).order_by("-id")

    @extend_schema(
        summary="Redeliver a dead letter (queued for the next sweep)",
        request=None,
        responses={200: serializers.DeadLetterSerializer, 403: FORBIDDEN, 404: NOT_FOUND},
    )
    @action(detail=True, methods=["post"], filter_backends=[])
    def redeliver(self, request: Request, pk: str | None = None) -> Response:
        letter = services.redeliver(self.get_object())
        return Response(serializers.DeadLetterSerializer(letter).data)
