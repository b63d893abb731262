"""InfiniBand and host rules: port state, rate, error counters, link flaps, EDAC, disks, scheduler."""

from __future__ import annotations

from health.choices import AlertState
from health.choices import Severity as S
from health.models import Alert, Finding

from .conftest import T0, ib_port, minutes, report


def firing(node, rule):
    return list(Alert.objects.filter(node=node, rule=rule, state=AlertState.FIRING))


def ports(*changed):
    by_name = {(p["device"], p["port"]): p for p in changed}
    return [by_name.get((f"mlx5_{i}", 1), ib_port(f"mlx5_{i}")) for i in range(8)]


def counters(**values):
    return {"symbol_error": 0, "port_rcv_errors": 0, "link_error_recovery": 0, "link_downed": 0, **values}


def test_a_port_polling_is_down_on_that_port(node, feed):
    feed.send(report(T0, ib_ports=ports(ib_port("mlx5_3", state="DOWN", phys_state="Polling"))))

    [alert] = firing(node, "ib_port_down")
    assert (alert.subject, alert.severity) == ("mlx5_3/1", S.DEGRADED)


def test_a_flapping_port_is_one_alert_not_one_per_flap(node, feed):
    down = ib_port("mlx5_0", state="DOWN", phys_state="Polling")
    for i in range(6):
        feed.send(report(T0 + minutes(i), ib_ports=ports(down) if i % 2 == 0 else ports()))

    assert Alert.objects.filter(node=node, rule="ib_port_down").count() == 1
    assert Finding.objects.filter(node=node, rule="ib_port_down").count() == 1
    assert firing(node, "ib_port_down")[0].occurrences == 3


def test_a_port_below_the_profiles_hca_rate_is_degraded(node, feed):
    feed.send(report(T0, ib_ports=ports(ib_port("mlx5_5", rate_gbps=200.0))))

    [alert] = firing(node, "ib_rate_degraded")
    assert alert.last_finding.evidence == {"rate_gbps": 200.0, "expected_gbps": 400}


def test_symbol_errors_above_10_per_second_warn(node, feed):
    feed.send(report(T0, ib_ports=ports(ib_port("mlx5_1", counters=counters(symbol_error=5)))))
    feed.send(report(T0 + minutes(0.5), ib_ports=ports(ib_port("mlx5_1", counters=counters(symbol_error=300)))))
    assert not firing(node, "ib_errors_rising"), "295 in 30 s is 9.8/s"

    feed.send(report(T0 + minutes(1), ib_ports=ports(ib_port("mlx5_1", counters=counters(symbol_error=700)))))
    [alert] = firing(node, "ib_errors_rising")
    assert alert.severity == S.WARNING and "symbol_error" in alert.last_finding.evidence["counters"]


def test_an_ib_counter_reset_is_not_an_error_burst(node, feed):
    feed.send(report(T0, ib_ports=ports(ib_port("mlx5_1", counters=counters(symbol_error=90_000)))))
    feed.send(report(T0 + minutes(0.5), ib_ports=ports(ib_port("mlx5_1", counters=counters(symbol_error=3)))))

    assert not Alert.objects.exists()


def test_any_buffer_overrun_increase_warns(node, feed):
    feed.send(report(T0, ib_ports=ports(ib_port("mlx5_2", counters=counters(excessive_buffer_overrun_errors=0)))))
    feed.send(
        report(
            T0 + minutes(0.5), ib_ports=ports(ib_port("mlx5_2", counters=counters(excessive_buffer_overrun_errors=1)))
        )
    )

    assert firing(node, "ib_errors_rising")[0].subject == "mlx5_2/1"


def test_three_link_flaps_within_12_hours_are_degraded_and_clear_after_a_quiet_window(node, feed):
    for downed, hour in enumerate((0, 3, 6), start=1):
        feed.send(
            report(
                T0 + minutes(hour * 60), ib_ports=ports(ib_port("mlx5_4", counters=counters(link_downed=downed - 1)))
            )
        )
        feed.send(
            report(
                T0 + minutes(hour * 60 + 1), ib_ports=ports(ib_port("mlx5_4", counters=counters(link_downed=downed)))
            )
        )
    [alert] = firing(node, "ib_link_flaps")
    assert alert.last_finding.evidence["flaps_in_window"] == 3

    steady = ports(ib_port("mlx5_4", counters=counters(link_downed=3)))
    feed.send(report(T0 + minutes(7 * 60), ib_ports=steady))
    feed.send(report(T0 + minutes(18 * 60), ib_ports=steady))
    assert firing(node, "ib_link_flaps"), "the window still holds flaps"
    feed.send(report(T0 + minutes(19 * 60 + 1), ib_ports=steady))
    assert not firing(node, "ib_link_flaps")


def test_two_flaps_spread_over_a_day_do_not_fire(node, feed):
    feed.send(report(T0, ib_ports=ports(ib_port("mlx5_4", counters=counters(link_downed=0)))))
    feed.send(report(T0 + minutes(1), ib_ports=ports(ib_port("mlx5_4", counters=counters(link_downed=1)))))
    feed.send(report(T0 + minutes(13 * 60), ib_ports=ports(ib_port("mlx5_4", counters=counters(link_downed=2)))))
    feed.send(report(T0 + minutes(26 * 60), ib_ports=ports(ib_port("mlx5_4", counters=counters(link_downed=3)))))

    assert not firing(node, "ib_link_flaps")


def test_host_edac_uncorrected_rising_is_degraded(node, feed):
    feed.send(report(T0, host={"edac_uncorrected": 0}))
    feed.send(report(T0 + minutes(0.5), host={"edac_uncorrected": 1}))

    assert firing(node, "host_edac_uncorrected")[0].severity == S.DEGRADED


def test_a_failing_disk_and_a_dead_slurmd_warn(node, feed):
    feed.send(
        report(
            T0,
            host={
                "disks": [{"device": "nvme0n1", "healthy": False, "detail": "media errors"}],
                "scheduler": {"kind": "slurm", "daemon": "slurmd", "responsive": False},
            },
        )
    )

    assert firing(node, "disk_unhealthy")[0].subject == "nvme0n1"
    assert firing(node, "scheduler_daemon_unresponsive")[0].severity == S.WARNING
