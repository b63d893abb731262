"""Fleet inventory: where nodes live, who rents them, what they should be."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from .choices import SchedulerKind
from .expectations import validate_workload_expectations
from .schedulerkinds import scheduler_kind_label, validate_scheduler_kind


class Site(models.Model):
    """A data centre or hall."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=100, unique=True)
    location = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Cluster(models.Model):
    """A group of nodes in one site sharing one workload scheduler."""

    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="clusters")
    name = models.CharField(max_length=100, unique=True)
    # No choices: the kinds are registered by installed apps (fleet/schedulerkinds.py), and a
    # migration must not change with what is installed. The validator checks the registry.
    scheduler_kind = models.CharField(
        max_length=20,
        default=SchedulerKind.NONE,
        validators=[validate_scheduler_kind],
        help_text="A registered scheduler kind: slurm, kubernetes, none (and any an installed app adds).",
    )
    scheduler_endpoint = models.CharField(
        max_length=200, blank=True, help_text="Slurm controller host or Kubernetes API server URL."
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def get_scheduler_kind_display(self) -> str:
        """The kind's label from the registry (what Django would give for a field with choices)."""
        return scheduler_kind_label(self.scheduler_kind)


class Rack(models.Model):
    """A rack in a site; the smallest physical failure domain above the node."""

    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="racks")
    name = models.CharField(max_length=100)

    class Meta:
        ordering = ["site__name", "name"]
        constraints = [models.UniqueConstraint(fields=["site", "name"], name="unique_rack_per_site")]

    def __str__(self) -> str:
        return f"{self.site.slug}/{self.name}"


class Tenant(models.Model):
    """A customer organisation that rents nodes."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=100, unique=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class TenantMembership(models.Model):
    """Ties a customer's user account to its tenant; such users see only that tenant's nodes."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tenant_membership")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant}"


class HardwareProfile(models.Model):
    """A SKU: what a node of this kind must contain, and its firmware baseline."""

    name = models.CharField(max_length=100, unique=True)
    gpu_model = models.CharField(max_length=100)
    gpu_count = models.PositiveSmallIntegerField()
    hca_count = models.PositiveSmallIntegerField(default=0, help_text="InfiniBand HCAs expected.")
    hca_rate_gbps = models.PositiveIntegerField(default=0, help_text="Expected link rate per HCA port.")
    memory_gb = models.PositiveIntegerField(help_text="Host memory in GiB.")
    firmware_baseline = models.JSONField(
        default=dict,
        blank=True,
        help_text='Minimum firmware per component, e.g. {"bios": "1.8.2", "bmc": "5.10"}.',
    )
    workload_expectations = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_workload_expectations],
        help_text="Expected figures of the training-step check per workload (named in the node agents' config), "
        'e.g. {"tiny-train": {"min_samples_per_s": 20000, "max_loss": 2.5, "max_seconds": 60}}.',
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Persona(models.Model):
    """The role a node is given (training, inference, ...): its boot image, what the workload
    scheduler should know of it, and which Day 1 stages a node re-roled to it walks."""

    name = models.CharField(max_length=100, unique=True)
    description = models.CharField(max_length=300, blank=True)
    boot_image = models.CharField(max_length=200, blank=True, help_text="OS image a node of this role boots.")
    scheduler_labels = models.JSONField(
        default=dict, blank=True, help_text='Kubernetes node labels, e.g. {"nodewarden.io/role": "inference"}.'
    )
    slurm_partition = models.CharField(max_length=100, blank=True, help_text="Slurm partition nodes of this role join.")
    validation_stages = models.JSONField(
        default=list,
        blank=True,
        help_text="Day 1 stages a node re-roled to this persona walks (firmware, inventory, burn_in, fabric, "
        "reliability); empty: all of them.",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
