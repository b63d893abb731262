"""RSGI and ASGI entry point of the ingest process group: the agent report endpoint's own road
(telemetry.api.asgi: grouped, one writer thread), every other path to Django's ASGI handler.

    granian --interface rsgi --loop uvloop --no-ws nodewarden.asgi_ingest:application   (bin/serve ingest)
    granian --interface asgi --loop uvloop --no-ws nodewarden.asgi_ingest:application
    uvicorn nodewarden.asgi_ingest:application --loop uvloop --http httptools --no-proxy-headers
"""

import gc
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nodewarden.settings")
django.setup(set_prefix=False)

from telemetry.api.asgi import AgentReportsApp  # noqa: E402 - needs the settings loaded above

application = AgentReportsApp()

# What the process holds once loaded (modules, settings, the app) is never garbage: out of the
# collector's full passes, which otherwise walk all of it every few seconds at this endpoint's rate
# (about 170,000 objects, 45 ms a pass: bench/ingest.py's request p99).
gc.freeze()
