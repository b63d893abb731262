"""The playground: everything that shows Nodewarden off or tests it, and nothing the product needs.

- ``sandbox.demo``: the demo fleet's seed (months of history) and churn (Celery tasks that keep
  it moving through the real services);
- ``sandbox.simulator``: the fleet simulator (``manage.py simulate_fleet``) and its live mode, a
  Django app with the label ``simulator`` (its migrations and tables predate this package);
- ``sandbox.emulators``: launchers for the real peers the demo, the benchmarks and the tests run
  against (a Redfish and IPMI BMC emulator, a throw-away Slurm cluster, an ibsim fabric);
- ``sandbox.settings`` and ``sandbox.celery``: the product's settings and Celery app with these added.

The product never imports this package; it installs and starts without it (bin/test checks a
built wheel). This package may import the product, through its services.
"""
