"""Serializers of the event feed's API: the cursor query, CloudEvents, subscriptions, dead letters."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from fleet.models import Cluster, Tenant
from nodewarden.bounds import BIGINT_MAX

from ..events import TYPES
from ..models import DeadLetter, Subscription

MAX_LIMIT = 1000  # events per page of /api/events/
DEFAULT_LIMIT = 100
MAX_EVENT_TYPES = len(TYPES)


class EventQuerySerializer(serializers.Serializer[Any]):
    """The query of /api/events/: a cursor, a page size and filters (anything else is refused)."""

    after = serializers.IntegerField(
        required=False, default=0, min_value=0, max_value=BIGINT_MAX, help_text="next_cursor of the previous page."
    )
    limit = serializers.IntegerField(
        required=False, default=DEFAULT_LIMIT, min_value=1, max_value=MAX_LIMIT, help_text="Events per page."
    )
    type = serializers.ChoiceField(choices=TYPES, required=False, help_text="Only this CloudEvents type.")
    cluster = serializers.CharField(required=False, max_length=100, help_text="Only nodes of this cluster (name).")
    tenant = serializers.SlugField(required=False, max_length=100, help_text="Only nodes of this tenant (slug).")
    node = serializers.IntegerField(required=False, min_value=1, max_value=BIGINT_MAX, help_text="Only this node (id).")


class CloudEventSerializer(serializers.Serializer[Any]):
    """One node event in the CloudEvents 1.0 JSON format (structured mode)."""

    specversion = serializers.CharField()
    id = serializers.CharField(help_text="The node event's id: unique, increasing; de-duplicate on it.")
    # CloudEvents' names, not DRF's Field.source and Serializer.data (the metaclass takes them as fields).
    source = serializers.CharField()  # type: ignore[assignment]
    type = serializers.ChoiceField(choices=TYPES)
    subject = serializers.CharField(help_text="The node's hostname.")
    time = serializers.DateTimeField()
    datacontenttype = serializers.CharField()
    data = serializers.DictField(help_text="The event's fields: node_id, hostname, tenant, cluster, state, ...")  # type: ignore[assignment]


class EventPageSerializer(serializers.Serializer[Any]):
    events = CloudEventSerializer(many=True)
    next_cursor = serializers.IntegerField(help_text="Pass as ?after= for the next page (the same when nothing new).")


class SubscriptionSerializer(serializers.ModelSerializer[Subscription]):
    """A webhook subscription as listed (never its secret)."""

    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = Subscription
        fields = [
            "id",
            "url",
            "description",
            "tenant",
            "cluster",
            "event_types",
            "active",
            "created",
            "created_by_name",
            "cursor",
            "failures",
            "next_attempt_at",
            "last_error",
            "delivered_count",
            "last_delivered_at",
        ]
        read_only_fields = fields


class CreatedSubscriptionSerializer(SubscriptionSerializer):
    """The answer to a new subscription: its secret, shown this once."""

    class Meta(SubscriptionSerializer.Meta):
        fields = [*SubscriptionSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class SubscribeSerializer(serializers.Serializer[Any]):
    """A new subscription. A customer's is bound to its own tenant (another tenant: 403)."""

    url = serializers.URLField(max_length=500)
    description = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    tenant = serializers.SlugRelatedField(slug_field="slug", queryset=Tenant.objects.all(), required=False)
    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all(), required=False)
    event_types = serializers.ListField(
        child=serializers.ChoiceField(choices=TYPES), required=False, default=list, max_length=MAX_EVENT_TYPES
    )
    secret = serializers.CharField(
        min_length=16, max_length=200, required=False, default="", help_text="Generated when left out."
    )
    from_start = serializers.BooleanField(required=False, default=False, help_text="Deliver past events as well.")


class DeadLetterSerializer(serializers.ModelSerializer[DeadLetter]):
    class Meta:
        model = DeadLetter
        fields = [
            "id",
            "subscription",
            "event_id",
            "event_type",
            "cloudevent",
            "attempts",
            "last_error",
            "status",
            "created",
            "updated",
        ]
        read_only_fields = fields
