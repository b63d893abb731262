"""RSGI and ASGI entry point of the ingest process group: the agent report endpoint's own road
(telemetry.api.asgi: grouped, one writer thread), every other path to Django's ASGI handler.

    granian --interface rsgi --loop uvloop --no-ws nodewarden.asgi_ingest:application   (bin/serve ingest)
    granian --interface asgi --loop uvloop --no-ws nodewarden.asgi_ingest:application
    uvicorn nodewarden.asgi_ingest:application --loop uvloop --http httptools --no-proxy-headers
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nodewarden.settings")
django.setup(set_prefix=False)

from telemetry.api.asgi import AgentReportsApp  # noqa: E402 - needs the settings loaded above

application = AgentReportsApp()
