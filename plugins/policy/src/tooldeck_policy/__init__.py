"""tooldeck's default policy: security tiers and grants, path, shell and URL guards, rule filters.

The guards are usable on their own::

    from tooldeck_policy import analyze_command, check_path, check_url

    check_path("../etc/passwd", "/srv/work", ["{workdir}"])   # -> reason (str) or None
    check_url("http://169.254.169.254/", allow=())             # -> reason (str) or None
    analyze_command("ls -la; id").injection                    # -> ("';' runs a second command",)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tooldeck_hookspecs import lazy_exports

from ._authorize import authorize, url_allow_list
from ._filters import BOOST, SCAN_TTL_S, environment_topics, rule_filter, workdir_topics
from ._paths import check_path, expand_allowed_paths, resolve_path
from ._urls import ENV_ALLOW, ENV_DNS_TIMEOUT, check_url, parse_allow_list, split_allow_entry

if TYPE_CHECKING:
    from ._shell import CommandVerdict, analyze_command

# The shell analyzer compiles its many patterns at import (several ms): only a call with a
# command argument needs it, so it loads at first use (PEP 562), not with every deck.
__getattr__, __dir__ = lazy_exports(
    __name__, {"CommandVerdict": "._shell", "analyze_command": "._shell"}
)

__all__ = [
    "BOOST",
    "ENV_ALLOW",
    "ENV_DNS_TIMEOUT",
    "SCAN_TTL_S",
    "CommandVerdict",
    "analyze_command",
    "authorize",
    "check_path",
    "check_url",
    "environment_topics",
    "expand_allowed_paths",
    "parse_allow_list",
    "split_allow_entry",
    "resolve_path",
    "rule_filter",
    "url_allow_list",
    "workdir_topics",
]
