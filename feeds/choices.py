"""Choices of the event feed."""

from django.db import models


class DeadLetterStatus(models.TextChoices):
    """A dead letter waits for an operator; a redelivery request queues it for the next sweep."""

    DEAD = "dead", "Dead"
    QUEUED = "queued", "Queued for redelivery"
    DELIVERED = "delivered", "Redelivered"
