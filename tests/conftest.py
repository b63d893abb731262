"""Shared fixtures: personas (admin, operator, viewer, customer) and a small fleet."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.contrib.auth.models import Group

from fleet.choices import SchedulerKind
from nodes.roles import FLEET_ADMINS, OPERATORS
from sandbox.emulators.slurm import SlurmCluster, slurm_installed

from .factories import ClusterFactory, TenantFactory, UserFactory

IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.fixture(autouse=True, scope="session")
def _process_ingest_writers_end_before_the_database(django_db_setup, django_db_blocker):
    """Reports posted outside any test's own committer (a module- or session-scoped fixture's, before
    ``_own_ingest_committer`` applies) start the process's writers, which hold a connection each: they
    end before the test database is dropped (else: "being accessed by other users", 5 s a worker)."""
    yield
    from telemetry import groupcommit

    with django_db_blocker.unblock():
        groupcommit.COMMITTER.stop(wait=5)


@pytest.fixture(autouse=True)
def _fresh_cache(settings):
    """Every test starts with an empty cache of its own process: the counts of wrong credentials
    (nodewarden.throttling) must not carry from one test to the next, and the Redis bin/test
    starts is shared by the xdist workers (tests/security tests the Redis cache on its own)."""
    from django.core.cache import cache

    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "nodewarden-tests"}
    }
    cache.clear()


@contextmanager
def own_ingest_committer(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A group committer of its own (telemetry.groupcommit) in place of the process's; on leaving, the
    writer threads started meanwhile end, their connections closed. Only those are waited for."""
    from telemetry import groupcommit

    fresh = groupcommit.GroupCommitter()
    monkeypatch.setattr(groupcommit, "COMMITTER", fresh)
    yield fresh
    fresh.stop(wait=5)  # its own writers only (GroupCommitter keeps them)


@pytest.fixture(autouse=True)
def _own_ingest_committer(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Each test gets a group committer of its own, whose writers end with the test.

    The process's committer starts its writers on the first agent report posted through the WSGI road
    on PostgreSQL outside a transaction (a live server, a ``transaction=True`` test) and keeps them for
    the worker's life: they held connections that kept the worker's test database from being dropped,
    and tests that waited for every ``ingest-writer`` thread waited 5 s on each of them, every test."""
    with own_ingest_committer(monkeypatch) as fresh:
        yield fresh


@pytest.fixture
def operator(db):
    user = UserFactory(username="operator", is_staff=True)
    user.groups.add(Group.objects.get(name=OPERATORS))
    return user


@pytest.fixture
def fleet_admin(db):
    user = UserFactory(username="fleetadmin", is_staff=True, is_superuser=True)
    user.groups.add(Group.objects.get(name=FLEET_ADMINS))
    return user


@pytest.fixture
def viewer(db):
    """Staff who may look at everything and change nothing."""
    return UserFactory(username="viewer", is_staff=True)


@pytest.fixture
def tenant(db):
    return TenantFactory(name="Acme AI", slug="acme")


@pytest.fixture
def other_tenant(db):
    return TenantFactory(name="Globex", slug="globex")


@pytest.fixture
def customer(tenant):
    return UserFactory(username="acme-user", tenant=tenant)


def require_service(env_var: str, what: str) -> str:
    """The URL of a real service started by bin/test; in CI its absence is a failure, not a skip."""
    url = os.environ.get(env_var, "")
    if not url:
        if IN_CI:
            pytest.fail(f"{what} is required in CI but {env_var} is not set (run bin/test)")
        pytest.skip(f"{what} not configured ({env_var} unset); bin/test starts one")
    return url


@pytest.fixture
def busy_scheduler(monkeypatch):
    """Every cluster's workload scheduler reports a customer job on every node, and records what
    it was asked. A stand-in for tests about Nodewarden's own decisions; the adapters themselves
    are tested against a real Slurm (tests/schedulers) and a Kubernetes stand-in."""
    from schedulers import base

    class Busy(base.SchedulerAdapter):
        kind = "busy"
        calls: list[tuple[str, str]] = []
        running = True
        fences = False  # whether it can fence single GPUs (base adapter: it cannot)

        def is_running_work(self, node):
            return Busy.running

        def cordon(self, node, *, reason):
            Busy.calls.append(("cordon", node.hostname))

        def uncordon(self, node, *, reason):
            Busy.calls.append(("uncordon", node.hostname))

        def drain(self, node, *, reason):
            Busy.calls.append(("drain", node.hostname))

        def evict(self, node, *, reason):
            Busy.calls.append(("evict", node.hostname))

        def hold_for_check(self, node, *, reason):
            Busy.calls.append(("hold_for_check", node.hostname))
            return True

        def release_check_hold(self, node, *, reason):
            Busy.calls.append(("release_check_hold", node.hostname))
            return True

        def fence_gpus(self, node, indices, *, reason):
            Busy.calls.append(("fence_gpus", node.hostname))
            return Busy.fences

        def unfence_gpus(self, node, indices, *, reason):
            Busy.calls.append(("unfence_gpus", node.hostname))
            return Busy.fences

        def drain_state(self, node):
            return base.DrainState(
                cordoned=True,
                drained=not Busy.running,
                running_jobs=int(Busy.running),
                owner=base.OWNER,
                detail="stand-in",
            )

    Busy.calls = []
    monkeypatch.setattr(base, "adapter_for", lambda cluster: Busy(cluster))
    return Busy


# --- A real Slurm 22.05 cluster (sandbox.emulators.slurm) ----------------------------------------
# Defined here, once: a session-scoped fixture imported into several modules or conftests is a fixture
# of each of them, and each started (and kept to the session's end) a cluster of its own: up to six
# per xdist worker. Now one per worker, each on its own free ports.

SLURM_NODES = ["gpu-s-01", "gpu-s-02", "gpu-s-03", "gpu-s-04"]


def require_slurm() -> None:
    """Skip without Slurm and munge, or without root to run them; in CI that is a failure."""
    if not slurm_installed():
        what = "Slurm and munge (apt-get install slurm-wlm munge)"
    elif os.geteuid() != 0:
        what = "root, to run slurmd and munged"
    else:
        return
    if IN_CI:
        pytest.fail(f"{what} is required in CI (bin/test installs the packages and runs as root)")
    pytest.skip(f"{what} is not available")


@pytest.fixture(scope="session")
def slurm_session() -> Iterator[SlurmCluster]:
    """The session's Slurm cluster (with xdist, one per worker)."""
    require_slurm()
    with SlurmCluster(SLURM_NODES) as slurm:
        yield slurm


@pytest.fixture
def slurm(slurm_session: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's cluster, put back to all-idle and no jobs after the test."""
    yield slurm_session
    slurm_session.reset()


@pytest.fixture
def slurm_cluster(db: None, slurm: SlurmCluster) -> Any:
    """A Cluster row whose scheduler is the session's Slurm cluster."""
    return ClusterFactory(scheduler_kind=SchedulerKind.SLURM, scheduler_endpoint=str(slurm.conf_path))
