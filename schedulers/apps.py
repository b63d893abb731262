from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.apps import AppConfig

if TYPE_CHECKING:
    from .base import SchedulerAdapter


def slurm_adapter(cluster: Any) -> SchedulerAdapter:
    from .slurm import SlurmAdapter  # imported on first use, as before the registry: start-up stays light

    return SlurmAdapter(cluster)


def kubernetes_adapter(cluster: Any) -> SchedulerAdapter:
    from .kubernetes import KubernetesAdapter  # the kubernetes client takes a while to import

    return KubernetesAdapter(cluster)


class SchedulersConfig(AppConfig):
    name = "schedulers"
    verbose_name = "Workload schedulers"

    def ready(self) -> None:
        from fleet.choices import SchedulerKind
        from fleet.schedulerkinds import register_scheduler_kind
        from nodes.followups import on_gpu_fence_change
        from nodes.whyhere import why_here_fact

        from . import reactions  # registers the scheduler reactions of every transition
        from .whyhere import scheduler_view

        on_gpu_fence_change(reactions.react_to_gpu_fence)  # a fenced GPU reaches the scheduler
        why_here_fact(scheduler_view)  # the node page's header: what the scheduler was last asked

        # The product's schedulers; other apps register theirs the same way (the sandbox's simulator).
        register_scheduler_kind(SchedulerKind.SLURM.value, SchedulerKind.SLURM.label, slurm_adapter)
        register_scheduler_kind(SchedulerKind.KUBERNETES.value, SchedulerKind.KUBERNETES.label, kubernetes_adapter)
