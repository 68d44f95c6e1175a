"""Rule filters for the hand: what the session rules out, and what its surroundings suggest.

Exclusions: a category the session excluded, a level above the session's maximum. Moderate tools
whose category is not granted stay in the hand on purpose: the user can grant the category when
the model asks for it, and the authorize stage refuses the call until then with a message that
says which grant is missing.

Preferences: small boosts (``BOOST``) for tools whose category or tags match what the workdir
holds (``.git`` -> git, ``pyproject.toml`` -> python, ``package.json`` -> node/javascript, ...) or
what the session's environment says (``VIRTUAL_ENV`` -> python, ``KUBECONFIG`` -> kubernetes,
...). A workdir is scanned once per ``SCAN_TTL_S`` seconds (one ``os.scandir`` of its top level,
at most 4,096 entries; a bigger folder is asked for each marker name instead).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence

from tooldeck_hookspecs import (
    LEVEL_ORDER,
    Exclusion,
    Preference,
    SessionInfo,
    ToolDefinition,
)

__all__ = ["BOOST", "SCAN_TTL_S", "environment_topics", "rule_filter", "workdir_topics"]

#: The boost a tool gets when its category or tags match the workdir or environment.
BOOST = 0.05
#: How long a workdir scan is reused.
SCAN_TTL_S = 5.0

#: Marker file or folder in a workdir -> topics (categories or tags) it makes likely.
WORKDIR_MARKERS: Mapping[str, tuple[str, ...]] = {
    ".git": ("git",),
    "pyproject.toml": ("python",),
    "setup.py": ("python",),
    "setup.cfg": ("python",),
    "requirements.txt": ("python",),
    "Pipfile": ("python",),
    "package.json": ("node", "javascript", "npm"),
    "tsconfig.json": ("typescript", "javascript", "node"),
    "Cargo.toml": ("rust", "cargo"),
    "go.mod": ("go",),
    "Gemfile": ("ruby",),
    "pom.xml": ("java", "maven"),
    "build.gradle": ("java", "gradle"),
    "Dockerfile": ("docker",),
    "docker-compose.yml": ("docker",),
    "compose.yaml": ("docker",),
    "Makefile": ("make",),
    "CMakeLists.txt": ("cmake", "c", "cpp"),
    ".terraform": ("terraform",),
    "main.tf": ("terraform",),
    "Chart.yaml": ("kubernetes", "helm"),
}

#: Environment variable -> topics.
ENVIRONMENT_MARKERS: Mapping[str, tuple[str, ...]] = {
    "VIRTUAL_ENV": ("python",),
    "CONDA_PREFIX": ("python",),
    "NODE_ENV": ("node", "javascript"),
    "NVM_DIR": ("node", "javascript"),
    "CARGO_HOME": ("rust",),
    "GOPATH": ("go",),
    "JAVA_HOME": ("java",),
    "KUBECONFIG": ("kubernetes",),
    "DOCKER_HOST": ("docker",),
    "AWS_PROFILE": ("aws", "cloud"),
    "AWS_REGION": ("aws", "cloud"),
    "GOOGLE_CLOUD_PROJECT": ("gcp", "cloud"),
    "AZURE_SUBSCRIPTION_ID": ("azure", "cloud"),
    "GITHUB_ACTIONS": ("ci", "git"),
    "CI": ("ci",),
}

#: Entries of a workdir's top level read by one scan; beyond, each marker is looked up.
_SCAN_ENTRIES = 4096

_scan_cache: dict[str, tuple[float, frozenset[tuple[str, str]]]] = {}
_scan_lock = threading.Lock()


def workdir_topics(workdir: str) -> frozenset[tuple[str, str]]:
    """(topic, marker) pairs for what ``workdir`` holds at its top level; cached briefly."""
    now = time.monotonic()
    with _scan_lock:
        hit = _scan_cache.get(workdir)
        if hit is not None and hit[0] > now:
            return hit[1]
    found: set[tuple[str, str]] = set()
    try:
        with os.scandir(workdir) as entries:
            for seen, entry in enumerate(entries):
                if seen >= _SCAN_ENTRIES:
                    # A huge folder: one look-up per marker name instead (bounded work: the
                    # filter runs on the event loop).
                    found = {
                        (topic, name)
                        for name, topics in WORKDIR_MARKERS.items()
                        if os.path.lexists(os.path.join(workdir, name))
                        for topic in topics
                    }
                    break
                for topic in WORKDIR_MARKERS.get(entry.name, ()):
                    found.add((topic, entry.name))
    except OSError:
        pass  # no workdir (yet) means no hints, not an error
    topics = frozenset(found)
    with _scan_lock:
        if len(_scan_cache) > 1024:
            _scan_cache.clear()
        _scan_cache[workdir] = (now + SCAN_TTL_S, topics)
    return topics


def environment_topics(environment: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    """(topic, variable) pairs for what the session's environment indicates."""
    return frozenset(
        (topic, f"${name}")
        for name, topics in ENVIRONMENT_MARKERS.items()
        if environment.get(name)
        for topic in topics
    )


def rule_filter(
    query: str, candidates: Sequence[ToolDefinition], session: SessionInfo
) -> list[Exclusion | Preference]:
    """Exclusions (excluded category, level above the maximum) and workdir/environment boosts."""
    del query  # the rules depend on the session, not on the wording of the task
    verdicts: list[Exclusion | Preference] = []
    hints: dict[str, set[str]] = {}
    for topic, marker in workdir_topics(session.workdir) if session.workdir else ():
        hints.setdefault(topic, set()).add(marker)
    for topic, marker in environment_topics(session.environment or {}):
        hints.setdefault(topic, set()).add(marker)
    max_rank = LEVEL_ORDER[session.max_level]
    for tool in candidates:
        if tool.category in session.excluded_categories:
            verdicts.append(
                Exclusion(name=tool.name, reason=f"category {tool.category!r} excluded by session")
            )
            continue
        if LEVEL_ORDER[tool.security.level] > max_rank:
            verdicts.append(
                Exclusion(
                    name=tool.name,
                    reason=(
                        f"level {tool.security.level} is above this session's maximum "
                        f"{session.max_level}"
                    ),
                )
            )
            continue
        if not hints:
            continue
        topics = {tool.category.lower(), *(t.lower() for t in tool.tags)}
        matched = sorted(topics & hints.keys())
        if matched:
            because = ", ".join(f"{t} ({', '.join(sorted(hints[t]))})" for t in matched)
            verdicts.append(
                Preference(
                    name=tool.name, boost=BOOST, reason=f"the session's context suggests {because}"
                )
            )
    return verdicts
