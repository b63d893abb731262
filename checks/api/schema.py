"""OpenAPI description of the node agent's bearer token, for the agent endpoints' schema.

It belongs next to ``telemetry.auth.AgentTokenAuthentication``; it lives here until the
telemetry app registers its own (then delete this module and its import in views).
"""
from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class AgentTokenScheme(OpenApiAuthenticationExtension):
    target_class = "telemetry.auth.AgentTokenAuthentication"
    name = "nodeAgentToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "nwa_... node agent token"}
