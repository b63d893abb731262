"""Stage 1, firmware: the BMC's (and the agent's) firmware versions against the hardware
profile's baseline; what is behind is updated through Redfish UpdateService where the
profile names an image, the node is power-cycled, and the versions are read again.

Baseline format (``HardwareProfile.firmware_baseline``), per component: a minimum version
(``{"bios": "1.8.2"}``) or a version and the image that brings it
(``{"bios": {"version": "1.8.2", "image": "http://repo/bios-1.8.2.bin"}}``). Components:
whatever the BMC's firmware inventory names (``bios``, ``bmc``, ...), plus ``gpu_vbios``
and ``driver`` (the GPU driver) from the node agent's latest report.
"""

from __future__ import annotations

from typing import Any

from telemetry.models import GpuState, NodeHealth

from .base import StageContext, Verdict, natural_key, version_behind


def _baseline(profile_baseline: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """component -> (minimum version, update image URI or "")."""
    result = {}
    for component, want in (profile_baseline or {}).items():
        if isinstance(want, dict):
            result[component.lower()] = (str(want.get("version", "")), str(want.get("image", "")))
        else:
            result[component.lower()] = (str(want), "")
    return result


def _agent_versions(node_id: int) -> dict[str, str]:
    """GPU VBIOS (the oldest across GPUs) and driver version from the agent's latest report."""
    versions: dict[str, str] = {}
    vbios = [v for v in GpuState.objects.filter(node_id=node_id).values_list("vbios_version", flat=True) if v]
    if vbios:
        versions["gpu_vbios"] = min(vbios, key=natural_key)
    driver = NodeHealth.objects.filter(node_id=node_id).values_list("driver_version", flat=True).first()
    if driver:
        versions["driver"] = driver
    return versions


def read_versions(ctx: StageContext) -> dict[str, str]:
    """Every firmware version the BMC and the agent report, component names in lower case."""
    from bmc import client

    versions = {k.lower(): v for k, v in client.firmware_inventory(ctx.node.bmc).items() if v}
    versions.update(_agent_versions(ctx.node.pk))
    return versions


def drift(baseline: dict[str, tuple[str, str]], versions: dict[str, str]) -> dict[str, dict[str, str]]:
    """Components behind their baseline, or not reported at all."""
    found = {}
    for component, (minimum, _image) in baseline.items():
        current = versions.get(component)
        if current is None:
            found[component] = {"baseline": minimum, "current": "not reported"}
        elif version_behind(current, minimum):
            found[component] = {"baseline": minimum, "current": current}
    return found


def _describe(found: dict[str, dict[str, str]]) -> str:
    return "; ".join(f"{c} {d['current']} (baseline {d['baseline']})" for c, d in sorted(found.items()))


def start(ctx: StageContext) -> Verdict | None:
    from bmc import client
    from bmc.drivers.base import BmcError, PowerAction

    baseline = _baseline(ctx.node.hardware_profile.firmware_baseline)
    if not hasattr(ctx.node, "bmc"):
        return Verdict.fail("No BMC is configured for this node: its firmware cannot be read or updated.")
    try:
        before = read_versions(ctx)
        behind = drift(baseline, before)
        updatable = {c: baseline[c][1] for c, d in behind.items() if baseline[c][1] and d["current"] != "not reported"}
        if updatable:
            for _component, image in sorted(updatable.items()):
                client.update_firmware(ctx.node.bmc, image)
            # New firmware takes effect on the next boot; wait until the BMC reports the node on again.
            client.power(ctx.node.bmc, PowerAction.FORCE_RESTART, wait=True)
            after = read_versions(ctx)
        else:
            after = before
    except BmcError as exc:
        return Verdict.fail(f"BMC error while reading or updating firmware: {exc}", error=str(exc))
    remaining = drift(baseline, after)
    evidence = {
        "before": before,
        "after": after,
        "drift_before": behind,
        "updated": sorted(updatable),
        "drift": remaining,
    }
    ctx.run.details = {**ctx.run.details, "firmware": evidence}
    missing = {c: d for c, d in remaining.items() if d["current"] == "not reported"}
    still_behind = {c: d for c, d in remaining.items() if c not in missing}
    if still_behind:
        how = " after updating " + ", ".join(sorted(updatable)) if updatable else ""
        no_image = [c for c in still_behind if not baseline[c][1]]
        hint = f"; no update image configured for {', '.join(sorted(no_image))}" if no_image else ""
        return Verdict(False, f"Firmware behind baseline{how}: {_describe(still_behind)}{hint}", evidence=evidence)
    updated = f"Updated {', '.join(sorted(updatable))}; " if updatable else ""
    unknown = f"; not reported: {', '.join(sorted(missing))}" if missing else ""
    if not baseline:
        return Verdict(
            True, f"No firmware baseline on profile {ctx.node.hardware_profile}; versions recorded.", evidence=evidence
        )
    return Verdict(
        True, f"{updated}{len(baseline) - len(missing)} component(s) at or above baseline{unknown}.", evidence=evidence
    )


def poll(ctx: StageContext) -> Verdict | None:
    return None  # the whole stage runs in start(); a run left open is caught by the stage timeout
