"""The integration tests' bounds on Slurm's events, derived from slurmctld's own intervals."""

from __future__ import annotations

from lab import labctl
from tests.integration.slurm_helpers import SlurmTiming
from tests.unit.lab.test_labctl import SLURMD_C, settings_for

# As `scontrol show config` prints them (Slurm 22.05, the lab's slurm.conf).
SHOW_CONFIG = """\
Configuration data as of 2026-12-03T11:41:02
AccountingStorageType   = (null)
InactiveLimit           = 0 sec
KillWait                = 5 sec
MessageTimeout          = 10 sec
SchedulerParameters     = batch_sched_delay=0,bf_interval=1,sched_interval=5
SchedulerType           = sched/backfill
SlurmdTimeout           = 300 sec
"""


def test_the_intervals_are_read_from_scontrol_show_config():
    assert SlurmTiming.parse(SHOW_CONFIG) == SlurmTiming(
        sched_interval=5, bf_interval=1, batch_sched_delay=0, kill_wait=5, message_timeout=10
    )


def test_intervals_the_config_leaves_out_are_slurms_defaults():
    show_config = SHOW_CONFIG.replace("batch_sched_delay=0,bf_interval=1,sched_interval=5", "(null)")
    timing = SlurmTiming.parse(show_config)
    assert (timing.sched_interval, timing.bf_interval, timing.batch_sched_delay) == (60, 30, 3)
    # With the defaults a startable job may wait two full passes: minutes, not 30 s.
    assert timing.start_bound == 3 + 5 + 10 + 2 * 60


def test_the_labs_slurm_conf_starts_a_pending_job_within_half_a_minute():
    settings = settings_for("/srv/lab")
    conf = labctl.render_template(
        "slurm.conf.in", labctl.slurm_template_values(settings, labctl.parse_node_config(SLURMD_C))
    )
    timing = SlurmTiming.parse(conf)
    assert timing.start_bound == 0 + 5 + 10 + 2 * 5
    assert timing.end_bound == 5 + 2 * 10
