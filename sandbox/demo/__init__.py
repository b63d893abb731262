"""The demo fleet: a plausible GPU fleet with months of history, and a simulator that keeps it moving.

``build_demo_fleet`` is fixture generation. It creates each node directly in its
final state and writes its history with ``bulk_create``, bypassing
``nodes.services`` on purpose: replaying months of life through the services
would take minutes and queue thousands of follow-up tasks. The rows still obey
the lifecycle: transitions come from the table declared on ``Node``, each row's
source is the previous row's target, the last target is the node's state, and
the state-count snapshots are computed by replaying those same rows.

``churn_demo_fleet`` is the opposite: a Celery task that changes the demo fleet
only through the real service functions, a handful of nodes a minute. It does
nothing unless NODEWARDEN_DEMO_CHURN is true and never touches nodes outside
the demo sites.
"""

from .bringup import bring_up_demo_nodes  # noqa: F401
from .catalog import (  # noqa: F401
    CAUSES,
    DEMO_PASSWORD,
    DEMO_SITE_SLUGS,
    DEMO_USERS,
    MAX_NODES,
    MIN_DAYS,
    MIN_NODES,
    NODES_PER_RACK,
    TRANSITIONS,
)
from .churn import churn_demo_fleet  # noqa: F401
from .schedulers import submit_demo_jobs  # noqa: F401
from .seed import (  # noqa: F401
    build_demo_fleet,
    demo_fleet_exists,
    demo_nodes,
    ensure_demo_users,
    login_lines,
    reset_demo_fleet,
)
from .telemetry import report_demo_telemetry  # noqa: F401
