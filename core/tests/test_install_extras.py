"""The install path a user takes: the core's extras name real distributions, `default` is a safe
deck, `all` is every distribution, and every "pip install ..." hint names something installable.

(The installs themselves run for real in `nox -s user_install` and `nox -s isolated`: minutes, so
not here.)
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def _project(folder: Path) -> dict:
    with open(folder / "pyproject.toml", "rb") as file:
        return tomllib.load(file)["project"]


#: Distribution name -> its [project] table, for every distribution of the repository.
PROJECTS = {
    project["name"]: project
    for project in (
        _project(p.parent)
        for pattern in ("hookspecs", "core", "plugins/*", "contrib_tools/*")
        for p in sorted(ROOT.glob(f"{pattern}/pyproject.toml"))
    )
}
CORE = PROJECTS["tooldeck"]
EXTRAS = CORE["optional-dependencies"]


def _closure(requirements: list[str]) -> set[str]:
    """Every repository distribution reached from ``requirements`` (through extras too)."""
    seen: set[str] = set()
    pending = [Requirement(r) for r in requirements]
    while pending:
        requirement = pending.pop()
        name = requirement.name
        if name == "tooldeck":
            for extra in requirement.extras:
                pending += [Requirement(r) for r in EXTRAS[extra]]
        if name in seen or name not in PROJECTS:
            continue
        seen.add(name)
        pending += [Requirement(r) for r in PROJECTS[name].get("dependencies", [])]
    return seen


def test_every_tooldeck_name_in_the_extras_is_a_distribution_of_the_repository():
    for extra, requirements in EXTRAS.items():
        for line in requirements:
            name = Requirement(line).name
            if name.startswith("tooldeck"):
                assert name in PROJECTS, f"extra {extra!r} names {name!r}, which nothing builds"
            if name == "tooldeck":
                for inner in Requirement(line).extras:
                    assert inner in EXTRAS, f"extra {extra!r} names tooldeck[{inner}]"


def test_default_is_a_safe_working_deck():
    reached = _closure(["tooldeck[default]"])
    for stage in (
        "tooldeck-schema",
        "tooldeck-policy",
        "tooldeck-faiss",
        "tooldeck-cache",
        "tooldeck-ratelimit",
        "tooldeck-runner",
        "tooldeck-tools-fs",
    ):
        assert stage in reached
    # Nothing that runs commands or browses comes by default.
    assert not reached & {"tooldeck-tools-shell", "tooldeck-tools-code", "tooldeck-tools-browser"}


def test_all_is_every_distribution():
    assert _closure(["tooldeck[all]"]) | {"tooldeck"} == set(PROJECTS)


def test_torch_is_never_a_direct_dependency():
    # Users install CPU torch first (README); an unpinned torch here would pull the CUDA build.
    for name, project in PROJECTS.items():
        for line in project.get("dependencies", []):
            assert Requirement(line).name != "torch", name


_HINT = re.compile(r"pip install\s+(?:-U\s+)?[`'\"]*([A-Za-z0-9_.\-]+(?:\[[\w,\-]+\])?)")


def _hints() -> list[tuple[str, str]]:
    found = []
    for source in sorted(ROOT.glob("*/**/src/**/*.py")):
        for match in _HINT.finditer(source.read_text()):
            found.append((str(source.relative_to(ROOT)), match.group(1)))
    return found


@pytest.mark.parametrize(("source", "target"), _hints())
def test_install_hints_name_installable_things(source, target):
    requirement = Requirement(target.strip("{}"))
    if "{" in target:  # a formatted hint (the name comes from a table checked elsewhere)
        return
    if requirement.name.startswith("tooldeck"):
        assert requirement.name in PROJECTS, f"{source}: hint names {target!r}"
        for extra in requirement.extras:
            assert extra in PROJECTS[requirement.name].get("optional-dependencies", {}), (
                f"{source}: hint names {target!r}"
            )


def test_missing_stage_hints_name_distributions():
    from tooldeck._deck import STAGE_PACKAGES

    for _hook, package in STAGE_PACKAGES.values():
        assert package in PROJECTS
