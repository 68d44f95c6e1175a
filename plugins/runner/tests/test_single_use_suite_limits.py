"""``test_runner_sandbox_limits`` again with ``zygote = false``: single-use workers."""

from pathlib import Path

from tooldeck_runner.testing import rerun_suite

# The ones left out pin zygote=false already.
skip = (
    "test_a_deleted_and_recreated_workdir_gets_fresh_workers",
    "test_a_new_protected_path_makes_warm_workers_stale",
)
suite = Path(__file__).with_name("test_runner_sandbox_limits.py")
rerun_suite(globals(), suite, skip=skip, zygote=False)
