"""Day 0 follow-up: once a node is Initializing, boot it from the network through its BMC.

One-time PXE boot override, then power: a node that is on is force-restarted, a node
that is off is powered on, and the BMC must report it on within the power timeout. The
installer's kernel command line carries the NoCloud seed URL, cloud-init runs the
user-data, the agent joins with its one-time token, and ``provisioning.services.join``
moves the node to Onboard.
"""

from __future__ import annotations

from nodes.followups import followup
from nodes.models import Node, NodeEvent


@followup("start_initialization")
def boot_from_network(node: Node, event: NodeEvent) -> str:
    """PXE once and power the node on (or restart it); raises BmcError for the run's record."""
    from bmc import client
    from bmc.drivers.base import PowerAction, PowerState

    endpoint = getattr(node, "bmc", None)
    if endpoint is None:
        return "No BMC configured: boot the node from the network by hand."
    client.set_boot_once(endpoint, "pxe")
    state = client.read_inventory(endpoint).power_state
    action = PowerAction.FORCE_RESTART if state == PowerState.ON else PowerAction.ON
    client.power(endpoint, action, wait=True)
    return f"PXE boot once set; {action.value.replace('_', ' ')} done, the node is booting the installer."
