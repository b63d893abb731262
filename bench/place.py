"""Where the benchmarks put their nodes: one 8 x H100 profile, its site and cluster (made once)."""

from __future__ import annotations

from typing import Any


def h100_place() -> tuple[Any, Any, Any]:
    """The benchmarks' hardware profile, site and cluster, created on first use."""
    from fleet.models import Cluster, HardwareProfile, Site

    profile, _ = HardwareProfile.objects.get_or_create(
        name="bench-h100",
        defaults={
            "gpu_model": "NVIDIA H100 80GB HBM3",
            "gpu_count": 8,
            "hca_count": 8,
            "hca_rate_gbps": 400,
            "memory_gb": 2048,
        },
    )
    site, _ = Site.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    cluster, _ = Cluster.objects.get_or_create(name="bench", defaults={"site": site})
    return profile, site, cluster
