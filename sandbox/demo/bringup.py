"""Demo Day 0 and Day 1 through the real pipeline, against a real Redfish emulator.

bin/demo starts one sushy-tools emulator (``sandbox.emulators.bmc``) serving a system for every
demo node plus a "bring-up bay" of new servers, and gives each demo node a BMC endpoint
on it (``attach_demo_bmcs``). Then, every 20 s from beat, ``bring_up_demo_nodes``:
- enrolls the next bay server now and then (``provisioning.enrollment.enroll``: reads its
  BMC, prepares boot and cloud-init, PXE-boots it through the BMC);
- plays the booting machine of each Initializing node whose BMC reports it on: reads the
  node's NoCloud user-data, takes the join command's token, and joins
  (``provisioning.services.join``), which makes the node Onboard and starts Day 1;
- plays the node agent for active checks: claims the queued checks of demo nodes and
  posts results with figures (``checks.services``), so burn-in decides on real rules;
- plays the node agent for agent commands: takes each demo node's queued commands
  (``telemetry.commands.deliver_commands``) and answers them (a GPU reset succeeds unless
  a job runs on the node, a reboot is queued, a diagnostics bundle carries the node's
  recent kernel lines), so the node page's command panel and the GPU reset rung show
  outcomes;
- opens the stage of a seeded node sitting in a Day 1 state without one.
Bay servers carry planted defects (old firmware that the update cannot fix, a missing
GPU, low NCCL bandwidth) so triage shows real reasons. Nothing here changes a state by
itself: every move is a service call, and the Day 1 stages decide.
"""

from __future__ import annotations

import random
import re
import shlex
import uuid
from datetime import timedelta
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from nodes.choices import DAY1_STAGES, NodeState
from nodes.services import Actor

from .catalog import CLUSTERS, PROFILES
from .seed import demo_fleet_exists, demo_nodes

S = NodeState
ACTOR = Actor.system("demo-bring-up")
UUID_NAMESPACE = uuid.UUID("6f1c1a53-2f0e-4c5b-9a0a-6e6f64657761")  # "nodewa..." : fixed, so files are stable
BAY_SIZE = 24
IN_FLIGHT_MAX = 3  # bay servers in Day 0/Day 1 at once
# Planted defects by bay slot: what a real bring-up bay turns up now and then.
BAY_DEFECTS = {3: "old_firmware", 7: "missing_gpu", 11: "low_nccl", 16: "old_firmware", 20: "missing_gpu"}
BAY_CLUSTER = "iad1-train-a"
DEMO_BIOS_IMAGE = "http://repo.demo.internal/firmware/{profile}/bios-{version}.bin"


def system_uuid(serial: str) -> str:
    return str(uuid.uuid5(UUID_NAMESPACE, serial))


def bay_servers() -> list[dict[str, Any]]:
    """The bay: new servers waiting to be enrolled, each with its serial and planted defect (or none)."""
    profile = next(c.profile for c in CLUSTERS if c.name == BAY_CLUSTER)
    baseline = PROFILES[profile]["firmware_baseline"]["bios"]
    servers = []
    for slot in range(1, BAY_SIZE + 1):
        defect = BAY_DEFECTS.get(slot, "")
        major, minor, patch = baseline.split(".")
        # Most arrive one minor release behind (the update brings them to baseline); "old" ones
        # are a major release behind, which the update cannot fix.
        bios = f"{int(major) - 1}.9.{patch}" if defect == "old_firmware" else f"{major}.{int(minor) - 1}.{patch}"
        serial = f"SNBAY{slot:05d}"
        servers.append(
            {
                "name": f"iad1-bay-{slot:02d}",
                "serial": serial,
                "uuid": system_uuid(serial),
                "bios_version": bios,
                "memory_gib": 2048,
                "cpus": 112,
                "defect": defect,
                "profile": profile,
            }
        )
    return servers


def demo_bmc_systems() -> list[dict[str, Any]]:
    """What the demo emulator serves: one system per demo node (firmware at its profile's
    baseline, on when the node runs), then the bay."""
    systems = []
    for hostname, serial, profile, state in (
        demo_nodes().values_list("hostname", "serial", "hardware_profile__name", "state").order_by("pk")
    ):
        baseline = PROFILES.get(profile, {}).get("firmware_baseline", {})
        systems.append(
            {
                "name": hostname,
                "uuid": system_uuid(serial),
                "bios_version": baseline.get("bios", "1.0.0"),
                "memory_gib": 2048,
                "cpus": 112,
                "power_state": "Off" if state in (S.ENROLLED, S.DECOMMISSIONED, S.RMA) else "On",
            }
        )
    for server in bay_servers():
        systems.append(
            {k: server[k] for k in ("name", "uuid", "bios_version", "memory_gib", "cpus")} | {"power_state": "Off"}
        )
    return systems


def attach_demo_bmcs(url: str, username: str, password: str) -> int:
    """Point every demo node's BMC endpoint at this run of the demo emulator (new port and
    password each run), creating the missing ones; returns how many were created."""
    from bmc.models import BmcEndpoint

    BmcEndpoint.objects.filter(node__in=demo_nodes()).update(address=url, username=username, password=password)
    missing = demo_nodes().filter(bmc__isnull=True).values_list("pk", "serial")
    endpoints = [
        BmcEndpoint(node_id=pk, address=url, username=username, password=password, system_id=system_uuid(serial))
        for pk, serial in missing
    ]
    BmcEndpoint.objects.bulk_create(endpoints, batch_size=500)
    return len(endpoints)


def configure_demo_day1() -> None:
    """Demo-sized Day 1: a one-minute burn-in and a five-minute soak, with real floors; the
    BIOS baseline names an update image (the emulator's SimpleUpdate applies it)."""
    from fleet.models import HardwareProfile
    from validation.models import Day1Spec

    for profile in HardwareProfile.objects.filter(name__in=PROFILES):
        baseline = dict(profile.firmware_baseline)
        bios = baseline.get("bios")
        if isinstance(bios, str):
            baseline["bios"] = {"version": bios, "image": DEMO_BIOS_IMAGE.format(profile=profile.pk, version=bios)}
        baseline["bmc"] = "1.00"  # every sushy-tools BMC reports firmware 1.00
        profile.firmware_baseline = baseline
        profile.save(update_fields=["firmware_baseline"])
        Day1Spec.objects.update_or_create(
            hardware_profile=profile,
            defaults={
                "burn_in_seconds": 60,
                "min_tflops_per_gpu": 600.0,
                "min_busbw_gbps": 300.0,
                "dcgm_level": 2,
                "soak_seconds": 300,
                "stage_timeout_seconds": 1800,
            },
        )


def defect_of(hostname: str) -> str:
    """The planted defect of a bay server (empty for every other node)."""
    match = re.fullmatch(r"iad1-bay-(\d+)", hostname)
    return BAY_DEFECTS.get(int(match.group(1)), "") if match else ""


# --- The periodic task ------------------------------------------------------------------


def _enroll_next(rng: random.Random) -> list[str]:
    from bmc.models import BmcEndpoint
    from provisioning.enrollment import EnrollmentError, EnrollmentRequest, enroll

    bay_nodes = demo_nodes().filter(hostname__startswith="iad1-bay-")
    in_flight = bay_nodes.filter(state__in=[S.ENROLLED, S.INITIALIZING, S.ONBOARD, *DAY1_STAGES]).count()
    if in_flight >= IN_FLIGHT_MAX or rng.random() > 0.3:
        return []
    taken = set(bay_nodes.values_list("hostname", flat=True))
    server = next((s for s in bay_servers() if s["name"] not in taken), None)
    template = BmcEndpoint.objects.filter(node__in=demo_nodes()).first()
    if server is None or template is None:
        return []
    cluster = next(c for c in CLUSTERS if c.name == BAY_CLUSTER)
    req = EnrollmentRequest(
        hostname=server["name"],
        serial=server["serial"],
        bmc_address=template.address,
        bmc_username=template.username,
        bmc_password=template.password,
        bmc_system_id=server["uuid"],
        hardware_profile=server["profile"],
        site=cluster.site,
        cluster=cluster.name,
    )
    try:
        enroll(req, actor=ACTOR, reason="New server racked in the bring-up bay")
    except EnrollmentError as exc:
        return [f"{server['name']}: not enrolled: {exc}"]
    return [f"{server['name']}: enrolled"]


def _boot_machines() -> list[str]:
    """Initializing nodes whose BMC reports them on 'boot': cloud-init's user-data, then the agent's join."""
    import yaml

    from bmc import client
    from bmc.drivers.base import BmcError, PowerState
    from provisioning import cloudinit
    from provisioning.services import JoinRefused, join

    done = []
    for node in (
        demo_nodes().filter(state=S.INITIALIZING, boot_config__isnull=False).select_related("boot_config", "bmc")[:5]
    ):
        try:
            if client.read_inventory(node.bmc).power_state != PowerState.ON:
                continue
        except BmcError:
            continue
        token = cloudinit.current_join_token(node.boot_config)
        if token is None:
            continue
        user_data = yaml.safe_load(cloudinit.user_data(node.boot_config, token))
        script = next(c[-1] for c in user_data["runcmd"] if c[:2] == ["sh", "-c"] and " join " in c[-1])
        command = shlex.split(script.split(" && ")[0])  # what the booted OS runs first: the agent's join
        join_token = command[command.index("--join-token") + 1]
        try:
            join(join_token, hostname=node.hostname, agent_facts={"agent_version": "demo", "gpus": 8})
        except JoinRefused as exc:
            done.append(f"{node.hostname}: join refused: {exc}")
        else:
            done.append(f"{node.hostname}: booted and joined")
    return done


def _figures(kind: str, hostname: str, rng: random.Random) -> tuple[str, dict[str, float], str]:
    from nodes.choices import RunKind, RunStatus

    if kind == RunKind.GPU_STRESS:
        per_gpu = {f"gpu{i}_tflops": round(rng.uniform(690, 735), 1) for i in range(8)}
        return RunStatus.PASSED, {**per_gpu, "min_tflops": min(per_gpu.values()), "errors": 0.0}, "8 GPUs stressed"
    if kind == RunKind.DCGM_DIAG:
        return RunStatus.PASSED, {"tests_passed": 9.0, "tests_failed": 0.0, "level": 2.0}, "dcgmi diag -r 2: pass"
    if kind == RunKind.NCCL_TEST:
        busbw = rng.uniform(120, 180) if defect_of(hostname) == "low_nccl" else rng.uniform(355, 370)
        return RunStatus.PASSED, {"busbw_gbps": round(busbw, 1)}, "all_reduce_perf -g 8"
    if kind == RunKind.TRAINING_STEP:  # the builtin workload's figures; judged against the profile's
        samples = round(rng.uniform(2900, 3100), 1)
        figures = {"samples_per_s": samples, "loss": round(rng.uniform(2.1, 2.4), 3), "loss_finite": 1.0, "steps": 50.0}
        return RunStatus.PASSED, {**figures, "seconds": 60.0}, "training step: 50 steps"
    return RunStatus.PASSED, {"bytes_tested": 7.2e11, "mismatches": 0.0}, "memory pattern test"


def _answer_checks(rng: random.Random) -> list[str]:
    """The agents' side of active checks on demo nodes: take what is queued (only when idle), report."""
    from checks.services import CheckConflict, CheckResult, claim_checks_for_agent, record_check_result
    from nodes.choices import ACTIVE_KINDS, RunStatus
    from nodes.models import Run

    done = []
    # Every real agent polls; the demo asks for at most 20 nodes a round, so it asks for those
    # whose latest report is idle (a busy one's claim is refused anyway) and does not starve them.
    node_ids = (
        Run.objects.filter(
            node__in=demo_nodes(), kind__in=ACTIVE_KINDS, status=RunStatus.QUEUED, node__health__gpu_compute_processes=0
        )
        .values_list("node_id", flat=True)
        .distinct()[:20]
    )
    now = timezone.now()
    for node_id in node_ids:
        claim = claim_checks_for_agent(node_id)
        for run in claim.runs:
            status, figures, summary = _figures(run.kind, run.node.hostname, rng)
            try:
                record_check_result(
                    run.pk,
                    node_id,
                    result=CheckResult(
                        status=status,
                        summary=summary,
                        figures=figures,
                        output="",
                        started_at=now - timedelta(seconds=30),
                        finished_at=now,
                    ),
                )
            except CheckConflict:
                continue
            done.append(f"{run.node.hostname}: {run.kind} {status}")
    return done


def _answer_commands(rng: random.Random) -> list[str]:
    """The agents' side of the command channel on demo nodes: take queued commands, answer each."""
    from nodes.models import NodeEvent
    from telemetry.choices import CommandStatus, CommandVerb
    from telemetry.commands import CommandConflict, CommandResult, deliver_commands, record_command_result
    from telemetry.models import AgentCommand

    done = []
    node_ids = (
        AgentCommand.objects.filter(node__in=demo_nodes(), status=CommandStatus.QUEUED)
        .values_list("node_id", flat=True)
        .distinct()[:20]
    )
    for node_id in node_ids:
        for command in deliver_commands(node_id):
            node = command.node
            if command.verb == CommandVerb.RESET_GPU:
                gpu = command.args["gpu"]
                busy = node.state == S.PRODUCTION and rng.random() < 0.5  # a customer job may hold it
                result = (
                    CommandResult("failed", f"busy: 1 process on GPU {gpu}", {"gpu": gpu, "processes": 1})
                    if busy
                    else CommandResult("succeeded", f"GPU {gpu} reset", {"gpu": gpu, "output": "GPU reset: OK"})
                )
            elif command.verb == CommandVerb.REBOOT:
                result = CommandResult("succeeded", "reboot queued (systemctl reboot)")
            else:
                recent = NodeEvent.objects.filter(node_id=node_id).order_by("-id").values_list("reason", flat=True)[:5]
                parts = {
                    "kernel_log": "\n".join(f"[demo] {line}" for line in reversed(list(recent))),
                    "nvidia_smi": f"==============NVSMI LOG==============\nAttached GPUs : 8 ({node.hostname})",
                    "infiniband": "mlx5_0 port 1: ACTIVE 400 Gb/sec (4X NDR)",
                }
                wanted = {part: text for part, text in parts.items() if part in command.args.get("collect", parts)}
                result = CommandResult("succeeded", f"{len(wanted)} parts collected", wanted)
            try:
                record_command_result(command.pk, node_id, result=result)
            except CommandConflict:
                continue
            done.append(f"{node.hostname}: {command.verb} {result.status}")
    return done


def _pick_up_seeded_day0(rng: random.Random) -> list[str]:
    """Seeded nodes were written straight into Day 0 states: move them on through the real road
    (enrolled: prepare boot and PXE; initializing with no boot config: provision; onboard: Day 1)."""
    from nodes.services import start_validation
    from provisioning.enrollment import start_day0
    from provisioning.services import prepare_boot

    done = []
    if rng.random() < 0.3:
        node = demo_nodes().filter(state=S.ENROLLED, bmc__isnull=False).order_by("state_changed_at").first()
        if node is not None:
            start_day0(node.pk, actor=ACTOR)
            done.append(f"{node.hostname}: provisioning")
    for node in demo_nodes().filter(state=S.INITIALIZING, boot_config__isnull=True)[:2]:
        prepare_boot(node.pk, actor=ACTOR, reason="Demo: provisioning a node seeded mid-installation")
        done.append(f"{node.hostname}: boot config prepared")
    for node in demo_nodes().filter(state=S.ONBOARD).order_by("state_changed_at")[:2]:
        start_validation(node.pk, actor=ACTOR, reason="Node onboard: starting Day 1 validation")
        done.append(f"{node.hostname}: Day 1 started")
    return done


def _open_missing_stages() -> list[str]:
    """Seeded nodes sit in Day 1 states without a stage run: open one through the operator verb.
    A node that entered its stage within the last minute is left to its transition's follow-up,
    still on its way (the pipeline would find the run either way: one open stage run per node)."""
    from nodes.choices import STAGE_KINDS, RunStatus
    from validation.services import StageConflict, start_stage

    stuck = (
        demo_nodes()
        .filter(state__in=DAY1_STAGES, state_changed_at__lt=timezone.now() - timedelta(minutes=1))
        .exclude(Q(runs__kind__in=STAGE_KINDS) & Q(runs__status=RunStatus.RUNNING))
        .order_by("state_changed_at")[:3]
    )
    done = []
    for node in stuck:
        try:
            start_stage(node.pk, actor=ACTOR, reason="Demo: the simulated fleet picks up this node's Day 1 stage")
        except StageConflict:
            continue
        done.append(f"{node.hostname}: {node.get_state_display()} stage opened")
    return done


@shared_task(name="sandbox.demo.bring_up_demo_nodes")
def bring_up_demo_nodes(seed: int | None = None) -> str:
    """One round of the demo's Day 0 and Day 1 (see the module docstring)."""
    if not settings.NODEWARDEN_DEMO_CHURN or not demo_fleet_exists():
        return "disabled"
    if not demo_nodes().filter(bmc__isnull=False).exists():
        return "no demo BMCs (bin/demo starts the emulator: manage.py demo_bmc)"
    rng = random.Random(seed)
    changes = (
        _enroll_next(rng)
        + _pick_up_seeded_day0(rng)
        + _boot_machines()
        + _answer_checks(rng)
        + _answer_commands(rng)
        + _open_missing_stages()
    )
    return f"{len(changes)} changes" + (": " + "; ".join(changes) if changes else "")
