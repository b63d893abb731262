"""Launchers for the real peers the demo, benchmarks and tests run against (none of them product code).

- ``bmc``: sushy-tools' Redfish emulator and OpenIPMI's ipmi_sim, one process serving many BMCs;
- ``slurm``: a throw-away Slurm 22.05 cluster (munged, slurmctld, slurmd) on 127.0.0.1;
- ``fabric``: an InfiniBand fabric simulated by ibsim with opensm, for the real infiniband-diags.
"""
