"""factory-boy factories, with a trait per lifecycle state.

A node built in a given state is set up directly (tests of the state machine
itself start from any state); production code only changes state through
``nodes.services``.
"""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from fleet.choices import SchedulerKind
from fleet.models import Cluster, HardwareProfile, Persona, Rack, Site, Tenant, TenantMembership
from nodes.choices import NodeState
from nodes.models import GPU, Node


class SiteFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Site
        django_get_or_create = ("slug",)

    name = factory.Sequence(lambda n: f"Site {n}")
    slug = factory.Sequence(lambda n: f"site-{n}")


class ClusterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Cluster

    site = factory.SubFactory(SiteFactory)
    name = factory.Sequence(lambda n: f"cluster-{n}")
    scheduler_kind = SchedulerKind.NONE


class RackFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Rack

    site = factory.SubFactory(SiteFactory)
    name = factory.Sequence(lambda n: f"r{n:03d}")


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant

    name = factory.Sequence(lambda n: f"Tenant {n}")
    slug = factory.Sequence(lambda n: f"tenant-{n}")


class HardwareProfileFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = HardwareProfile
        django_get_or_create = ("name",)

    name = "HGX H100 8-GPU"
    gpu_model = "NVIDIA H100 80GB HBM3"
    gpu_count = 8
    hca_count = 8
    hca_rate_gbps = 400
    memory_gb = 2048
    firmware_baseline = factory.LazyFunction(lambda: {"bios": "1.8.2", "bmc": "5.10"})


class PersonaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Persona
        django_get_or_create = ("name",)

    name = "training"


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    hostname = factory.Sequence(lambda n: f"gpu-node-{n:04d}")
    serial = factory.Sequence(lambda n: f"SN{n:08d}")
    bmc_address = factory.Sequence(lambda n: f"10.0.{n // 250}.{n % 250 + 1}")
    cluster = factory.SubFactory(ClusterFactory)
    site = factory.SelfAttribute("cluster.site")
    hardware_profile = factory.SubFactory(HardwareProfileFactory)

    class Params:
        production = factory.Trait(state=NodeState.PRODUCTION)
        triage = factory.Trait(state=NodeState.TRIAGE)


class GPUFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GPU

    node = factory.SubFactory(NodeFactory)
    index = factory.Sequence(lambda n: n % 8)
    uuid = factory.Sequence(lambda n: f"GPU-{n:08x}-0000-0000-0000-000000000000")
    serial = factory.Sequence(lambda n: f"1650{n:09d}")
    model = "NVIDIA H100 80GB HBM3"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.PostGenerationMethodCall("set_password", "password")

    @factory.post_generation
    def tenant(self, create, extracted, **kwargs):  # type: ignore[no-untyped-def]
        if extracted is not None:
            TenantMembership.objects.create(user=self, tenant=extracted)
        if create:
            self.save()
