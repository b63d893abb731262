"""CheckRun, the record of every background run on a node, moves from the checks app to nodes so
that nodes (its follow-up task, its history page) can use it without importing checks. State only:
the table keeps its name (``checks_checkrun``), its rows, indexes and constraints."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("nodes", "0003_state_change_indexes"),
        ("checks", "0005_checkrun_scheduler_hold"),  # the table exists (created by checks)
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="CheckRun",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "kind",
                            models.CharField(
                                choices=[
                                    ("transition_followup", "Transition follow-up"),
                                    ("gpu_stress", "GPU stress test"),
                                    ("dcgm_diag", "DCGM diagnostics"),
                                    ("nccl_test", "NCCL all-reduce test"),
                                    ("memory_test", "GPU memory test"),
                                    ("stage_firmware", "Firmware stage"),
                                    ("stage_inventory", "Inventory check stage"),
                                    ("stage_burn_in", "Burn-in stage"),
                                    ("stage_fabric", "Fabric and cable check stage"),
                                    ("stage_reliability", "Reliability assessment stage"),
                                ],
                                max_length=40,
                            ),
                        ),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("queued", "Queued"),
                                    ("running", "Running"),
                                    ("passed", "Passed"),
                                    ("failed", "Failed"),
                                    ("not_available", "Not available"),
                                    ("superseded", "Superseded"),
                                    ("cancelled", "Cancelled"),
                                    ("skipped", "Skipped"),
                                    ("error", "Error"),
                                ],
                                default="queued",
                                max_length=20,
                            ),
                        ),
                        ("task_id", models.CharField(blank=True, max_length=100)),
                        ("created", models.DateTimeField(default=django.utils.timezone.now)),
                        ("started", models.DateTimeField(blank=True, null=True)),
                        ("finished", models.DateTimeField(blank=True, null=True)),
                        ("summary", models.CharField(blank=True, max_length=300)),
                        ("error", models.TextField(blank=True)),
                        ("details", models.JSONField(blank=True, default=dict)),
                        (
                            "params",
                            models.JSONField(
                                blank=True, default=dict, help_text="Normalised parameters the agent runs with."
                            ),
                        ),
                        (
                            "figures",
                            models.JSONField(
                                blank=True, default=dict, help_text='Measured numbers, e.g. {"busbw_gbps": 362}.'
                            ),
                        ),
                        (
                            "output",
                            models.TextField(
                                blank=True, help_text="The tool's output as the agent sent it (at most 64 KiB)."
                            ),
                        ),
                        ("requested_reason", models.TextField(blank=True)),
                        (
                            "claimed_at",
                            models.DateTimeField(blank=True, help_text="When the node agent took the run.", null=True),
                        ),
                        (
                            "deadline",
                            models.DateTimeField(
                                blank=True,
                                help_text="A claimed run without a result by then becomes an error.",
                                null=True,
                            ),
                        ),
                        (
                            "scheduler_hold",
                            models.BooleanField(
                                default=False,
                                help_text="The node may be held (drained/cordoned) in its workload scheduler for this run and not given back yet: true from just before the hold is taken until it is released or found no longer the check's. A production node drained by us is legitimate only while a run has this set.",
                            ),
                        ),
                        (
                            "node",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE, related_name="check_runs", to="nodes.node"
                            ),
                        ),
                        (
                            "requested_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "trigger",
                            models.ForeignKey(
                                blank=True,
                                help_text="The history row (e.g. a transition) that asked for this run.",
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="runs",
                                to="nodes.nodeevent",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "checks_checkrun",
                        "ordering": ["-created", "-id"],
                        "indexes": [
                            models.Index(fields=["node", "-created"], name="checks_chec_node_id_a7c9ec_idx"),
                            models.Index(fields=["kind", "status", "finished"], name="checkrun_kind_status_finished"),
                            models.Index(
                                condition=models.Q(("status", "running")),
                                fields=["deadline"],
                                name="checkrun_running_deadline",
                            ),
                            models.Index(
                                condition=models.Q(("scheduler_hold", True)),
                                fields=["node"],
                                name="checkrun_scheduler_hold",
                            ),
                        ],
                        "constraints": [
                            models.UniqueConstraint(fields=("trigger", "kind"), name="one_run_per_trigger_and_kind"),
                            models.UniqueConstraint(
                                condition=models.Q(
                                    ("kind__in", ("gpu_stress", "dcgm_diag", "nccl_test", "memory_test")),
                                    ("status__in", ("queued", "running")),
                                ),
                                fields=("node", "kind"),
                                name="one_open_active_check_per_node_and_kind",
                            ),
                        ],
                    },
                ),
            ],
        ),
    ]
