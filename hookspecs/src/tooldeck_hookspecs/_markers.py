"""The two pluggy markers. Plugin authors import ``hookimpl`` from ``tooldeck_hookspecs``."""

from __future__ import annotations

import pluggy

PROJECT_NAME = "tooldeck"

#: Marks a hook specification (used only in this package and by plugins that add hooks).
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: Marks a hook implementation in a plugin.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
