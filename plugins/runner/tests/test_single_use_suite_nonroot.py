"""``test_nonroot`` again with ``zygote = false``: single-use workers."""

from pathlib import Path

from tooldeck_runner.testing import rerun_suite

# The one left out pins zygote=false already.
skip = ("test_every_process_of_the_sandbox_is_unprivileged_on_the_host",)
rerun_suite(globals(), Path(__file__).with_name("test_nonroot.py"), skip=skip, zygote=False)
