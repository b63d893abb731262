"""WSGI entry point: Django, with the agent report endpoint's lean road in front
(telemetry.api.wsgi: that one path skips the middleware it does not need)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nodewarden.settings")
django_application = get_wsgi_application()

from telemetry.api.wsgi import AgentReportsFastPath  # noqa: E402 - needs the settings loaded above

application = AgentReportsFastPath(django_application)
