"""Settings for the demo, the benchmarks and the test suite: the product's, with the sandbox apps.

``DJANGO_SETTINGS_MODULE=sandbox.settings`` (bin/demo, bench/, pytest). The product's own
settings (``nodewarden.settings``) never name these apps: an installed product starts without them.
"""

from nodewarden.settings import *  # noqa: F403
from nodewarden.settings import INSTALLED_APPS as PRODUCT_APPS

INSTALLED_APPS = [
    *PRODUCT_APPS,
    "sandbox",  # the demo's management commands
    "sandbox.simulator",  # the fleet simulator (app label "simulator")
]
