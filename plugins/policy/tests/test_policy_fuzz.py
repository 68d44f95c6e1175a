"""The guards answer every input with a verdict; none of them raises (errors are answers)."""

from __future__ import annotations

import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tooldeck_policy import analyze_command, check_path, check_url

SHELLISH = st.text(
    alphabet=st.sampled_from(list("ab /.-~$`'\"\\;|&<>(){}[]*#=\n\r%0x!")), max_size=40
)
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.one_of(SHELLISH, st.text(max_size=40)), st.booleans())
def test_policy_fuzz_analyze_command_never_raises(command: str, pipes: bool) -> None:
    verdict = analyze_command(command, allow_pipes=pipes)
    assert all(isinstance(r, str) and r for r in (*verdict.injection, *verdict.destructive))


@FAST
@given(st.lists(st.text(max_size=12), max_size=5))
def test_policy_fuzz_analyze_argv_never_raises(argv: list[str]) -> None:
    analyze_command(argv)


@FAST
@given(st.text(alphabet=st.sampled_from(list("ab./~\\%2e\x00")), max_size=30))
def test_policy_fuzz_check_path_contains(path: str) -> None:
    workdir = tempfile.gettempdir() + "/tooldeck-policy-fuzz-root"
    reason = check_path(path, workdir)
    if reason is None:
        resolved = os.path.realpath(os.path.join(workdir, path))
        assert resolved == workdir or resolved.startswith(workdir + "/")


@FAST
@given(st.text(max_size=60))
def test_policy_fuzz_check_url_never_raises(url: str) -> None:
    check_url("http://" + url, resolve=False)
    check_url(url, resolve=False)
