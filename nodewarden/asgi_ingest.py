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

# A young collection once this many more container objects live than when the last one ran (Python's
# default: 700). A group holds its requests' decoded reports while it is written, so at 700 a young
# collection ran every fraction of a millisecond, found them alive and moved them to the older
# generations, whose passes then walked them again: the collector was about 7 % of the process's
# CPU at 1,900 reports/s (gc.callbacks). Most of those objects are freed when their group is
# answered, which a collection every 50,000 lets happen first (bench/ingest.py --compare granian
# --connections 64, alternating: 4,163 / 4,303 -> 4,355 / 4,741 reports/s, 0.43-0.44 -> 0.40-0.43 ms
# of CPU a report). Garbage in cycles waits a little longer: at most this many objects.
YOUNG_COLLECTION_THRESHOLD = 50_000
gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *gc.get_threshold()[1:])
