"""``test_runner_sandbox_faults`` again with ``zygote = false``: single-use workers."""

from pathlib import Path

from tooldeck_runner.testing import rerun_suite

rerun_suite(globals(), Path(__file__).with_name("test_runner_sandbox_faults.py"), zygote=False)
