"""The shared protected-path rules: what they cover, the file-only ``HEAD`` check, ``**/`` rules,
folded spellings and :func:`find_protected`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tooldeck_hookspecs.protected import (
    DEFAULT_PROTECTED_PATHS,
    REPOSITORY_MARKER_FILES,
    find_protected,
    fold_name,
    normalise_rules,
    protected_rule,
)

# Files the host runs that only the fs pack refused before they moved into the defaults (so the
# sandbox binds them read-only and removes new ones too), each with the rule that covers it.
MOVED = [
    ("env/pyvenv.cfg", "pyvenv.cfg"),
    ("lib/python3.11/site-packages/x.py", "site-packages/"),
    ("env/lib/python3/dist-packages/x.py", "dist-packages/"),
    ("ipython_config.py", "ipython_config.py"),
    ("profile/ipython_kernel_config.py", "ipython_kernel_config.py"),
    ("jupyter_server_config.py", "jupyter_*_config.py"),
    (".devcontainer.json", ".devcontainer.json"),
    (".cursor/mcp.json", ".cursor/"),
    ("sub/.gemini/settings.json", ".gemini/"),
    (".zed/settings.json", ".zed/"),
    (".windsurf/rules.md", ".windsurf/"),
    ("opencode.jsonc", "opencode.jsonc"),
    ("rust-toolchain", "rust-toolchain"),
    ("mise.dev.toml", "mise.*.toml"),
    ("sub/.mise.local.toml", ".mise.*.toml"),
    (".config/nextest.toml", "/.config/"),
    ("sub/.config/mise/config.toml", "**/.config/mise/"),
    ("sub/mise/config.local.toml", "**/mise/config.*.toml"),
    (".bash_aliases", ".bash_aliases"),
    ("sub/.zlogout", ".zlogout"),
    (".tcshrc", ".tcshrc"),
    (".vimrc", ".vimrc"),
    (".local/bin/git", "/.local/"),
    (".aws/config", "/.aws/"),
    (".kube/config", "/.kube/"),
    (".gnupg/gpg-agent.conf", "/.gnupg/"),
    (".emacs.d/init.el", "/.emacs.d/"),
    (".pam_environment", "/.pam_environment"),
]


@pytest.mark.parametrize(("path", "rule"), MOVED)
def test_host_files_once_protected_by_the_fs_pack_only_are_defaults(path: str, rule: str) -> None:
    assert rule in DEFAULT_PROTECTED_PATHS
    assert protected_rule(path) == rule
    assert protected_rule(path, normalise_rules(["extra/"])) == rule


@pytest.mark.parametrize(
    "path",
    [
        "notes/.config/gitx",  # a project's nested .config/ is not the root's (nor mise's)
        "sub/.config/nvim/init.lua",
        "sub/.local/x.txt",  # home-folder rules are anchored
        "src/site_packages.py",
        "mise/notes.md",
        "templates/head/meta.html",
        "HEAD.md",
        "header.txt",
    ],
)
def test_ordinary_paths_stay_unprotected(path: str) -> None:
    assert protected_rule(path, is_file=True) is None


@pytest.mark.parametrize(
    "path", ["HEAD", "evil/HEAD", "a/b/head", "x/Head.", "x/\uff28\uff25\uff21\uff24"]
)
def test_a_head_file_is_protected_only_as_a_file(path: str) -> None:
    assert REPOSITORY_MARKER_FILES == ("HEAD",)
    assert protected_rule(path, is_file=True) == "HEAD"
    assert protected_rule(path) is None  # a folder of that name (or a caller that cannot tell)
    assert protected_rule(f"{path}/meta.html", is_file=True) is None  # beneath a folder HEAD


def test_rules_of_the_list_come_before_the_head_check_and_in_list_order() -> None:
    assert protected_rule(".git/HEAD", is_file=True) == ".git/"
    assert protected_rule(".config/git/config") == "/.config/git/"  # not the later "/.config/"
    assert protected_rule(".local/lib/python3.11/x.py") == "/.local/lib/"
    # A configured rule comes after every default, whichever kind of rule matched first.
    assert protected_rule(".pre-commit-config.yaml", normalise_rules(["*.yaml"])) == (
        ".pre-commit-config.yaml")
    assert protected_rule("deploy/x.yaml", normalise_rules(["*.yaml", "/deploy/"])) == "*.yaml"


def test_a_leading_double_star_matches_at_any_depth_only() -> None:
    rules = normalise_rules(["**/ci/deploy.yml", "**/secrets"])
    for path in ("ci/deploy.yml", "a/b/ci/deploy.yml", "a/ci/deploy.yml/x"):
        assert protected_rule(path, rules) == "**/ci/deploy.yml", path
    assert protected_rule("a/ci/other.yml", rules) is None
    assert protected_rule("a/ci", rules) is None
    assert protected_rule("x/secrets/key", rules) == "**/secrets"


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("tooldeck\u200d.toml", "tooldeck.toml"),
        ("\uff34\uff2f\uff2f\uff2c\uff24\uff25\uff23\uff2b.toml", "tooldeck.toml"),
        ("tooldeck.toml.", "tooldeck.toml"),
        ("sub/.g\u200cit/config", ".git/"),
        (".\uff43ursor/mcp.json", ".cursor/"),
        ("evil.p\ufe0fth", "*.pth"),
    ],
)
def test_folded_and_trailing_dot_spellings_are_matched(path: str, rule: str) -> None:
    assert protected_rule(path) == rule


def test_fold_name() -> None:
    assert fold_name("Plain.txt") == "Plain.txt"  # ASCII: left to the matcher's casefold
    assert fold_name("\uff34\uff2f\uff2f\uff2c.toml") == "tool.toml"
    assert fold_name("a\u00adb\ufeff") == "ab"
    assert fold_name("\u200b") == "\u200b"  # folds to nothing: kept


def test_find_protected_reports_head_files_but_not_head_folders(tmp_path: Path) -> None:
    bare = tmp_path / "evil"
    (bare / "objects").mkdir(parents=True)
    (bare / "refs").mkdir()
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    linked = tmp_path / "linked"
    linked.mkdir()
    os.symlink("refs/heads/main", linked / "head")  # git reads a symlinked HEAD too
    (tmp_path / "templates" / "HEAD").mkdir(parents=True)
    (tmp_path / "templates" / "HEAD" / "meta.html").write_text("")
    (tmp_path / ".cursor").mkdir()
    (tmp_path / ".cursor" / "mcp.json").write_text("{}")
    scan = find_protected(str(tmp_path))
    assert scan.complete
    found = {(m.path, m.rule) for m in scan.matches}
    assert found == {("evil/HEAD", "HEAD"), ("linked/head", "HEAD"), (".cursor", ".cursor/")}


def test_find_protected_reads_the_top_folder_whole_and_goes_level_by_level(
    tmp_path: Path,
) -> None:
    """A call that made many files hid what it planted among them from a walk that ran out of
    entries; the top folder is read whole, and nearer levels come before deeper ones."""
    for i in range(300):
        (tmp_path / f"filler-{i:04d}").touch()
    (tmp_path / "tooldeck.toml").touch()
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    for i in range(300):
        (deep / f"x{i}").touch()
    (tmp_path / "zz").mkdir()
    (tmp_path / "zz" / ".envrc").touch()
    scan = find_protected(str(tmp_path), max_depth=8, max_entries=50)
    paths = {m.path for m in scan.matches}
    assert "tooldeck.toml" in paths  # on the top level, past the entry budget
    assert "zz/.envrc" in paths  # level 1 before the deep folder's 300 entries
    assert not scan.complete


def test_find_protected_reports_an_environment_whole_whatever_its_name(tmp_path: Path) -> None:
    """``venv/bin/activate`` and conda's ``activate.d`` scripts run on the host as surely as
    ``site-packages``: the folder holding ``pyvenv.cfg`` (or ``conda-meta``) is the match, so the
    sandbox binds all of it read-only (it used to bind only pyvenv.cfg and site-packages)."""
    venv = tmp_path / "tools" / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("")
    (venv / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (tmp_path / "cenv" / "CONDA-META").mkdir(parents=True)  # any spelling: protection only adds
    (tmp_path / "cenv" / "etc" / "conda" / "activate.d").mkdir(parents=True)
    (tmp_path / "plain" / "bin").mkdir(parents=True)
    (tmp_path / "pyvenv.cfg").write_text("")  # the root itself is not checked as a folder
    scan = find_protected(str(tmp_path), max_depth=8, record_folders=True)
    found = {(m.path, m.rule, m.environment) for m in scan.matches}
    assert found == {
        ("tools/venv", "pyvenv.cfg", True),
        ("cenv", "conda-meta", True),
        ("pyvenv.cfg", "pyvenv.cfg", False),
    }
    # Folders no rule covers, by inode: the environments are not among them.
    assert sorted(scan.folders.values()) == ["plain", "plain/bin", "tools"]
    assert scan.folders[os.lstat(tmp_path / "tools").st_ino] == "tools"
    # Without environments: what the rules alone cover.
    paths = {m.path for m in find_protected(str(tmp_path), max_depth=8,
                                             environments=False).matches}
    assert paths == {"pyvenv.cfg", "tools/venv/pyvenv.cfg",
                     "tools/venv/lib/python3.11/site-packages"}


def test_find_protected_is_incomplete_where_a_folder_cannot_be_listed(tmp_path: Path) -> None:
    """A folder whose path is longer than PATH_MAX was skipped silently: what it held was
    reported nowhere and the scan said it was complete."""
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        for _ in range(25):  # 25 levels of 200 characters: past PATH_MAX (4096)
            os.mkdir("n" * 200, dir_fd=fd)
            inner = os.open("n" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.close(os.open(".envrc", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    finally:
        os.close(fd)
    scan = find_protected(str(tmp_path), max_depth=100)
    assert scan.matches == () and not scan.complete


# `python -m tooldeck` imports the package from its current folder before any code of
# tooldeck's runs: every folder may be that folder, so the package's forms are refused anywhere.
TOOLDECK_PACKAGE = [
    ("tooldeck.py", "tooldeck.py"),
    ("docs/tooldeck.py", "tooldeck.py"),
    ("docs/Tooldeck.PY", "tooldeck.py"),
    ("a/b/tooldeck/__init__.py", "**/tooldeck/__init__.py"),
    ("tooldeck/__init__.py", "**/tooldeck/__init__.py"),
    ("a/tooldeck.cpython-311-x86_64-linux-gnu.so", "tooldeck.*.so"),
    ("a/tooldeck.so", "tooldeck.so"),
    ("a/tooldeck/__init__.abi3.so", "**/tooldeck/__init__.*.so"),
    ("a/tooldeck/__init__.so", "**/tooldeck/__init__.so"),
]


@pytest.mark.parametrize(("path", "rule"), TOOLDECK_PACKAGE)
def test_the_tooldeck_package_is_protected_in_every_folder(path: str, rule: str) -> None:
    assert protected_rule(path, is_file=True) == rule


@pytest.mark.parametrize("path", ["docs/tooldeck.md", "a/tooldeck/cli.py", "a/tooldeck_x.py",
                                  "a/my_tooldeck.py", "tooldeck/notes/__init__.py"])
def test_names_that_only_look_like_the_tooldeck_package_stay_writable(path: str) -> None:
    assert protected_rule(path, is_file=True) is None


def test_find_environment_finds_venvs_and_conda_environments_by_their_markers(
    tmp_path: Path,
) -> None:
    from tooldeck_hookspecs import ENVIRONMENT_MARKERS, find_environment

    assert ENVIRONMENT_MARKERS == ("pyvenv.cfg", "conda-meta")
    (tmp_path / "env" / "bin").mkdir(parents=True)
    (tmp_path / "env" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (tmp_path / "tox" / "py311" / "conda-meta").mkdir(parents=True)
    (tmp_path / "plain" / "bin").mkdir(parents=True)
    found = find_environment(str(tmp_path), ["env", "bin"])
    assert found is not None and (found.path, found.rule) == ("env", "pyvenv.cfg")
    found = find_environment(str(tmp_path), ["tox", "py311"])
    assert found is not None and (found.path, found.rule) == ("tox/py311", "conda-meta")
    assert find_environment(str(tmp_path), ["plain", "bin"]) is None
    assert find_environment(str(tmp_path), ["missing", "folder"]) is None
    # The root itself is not checked: a root that is an environment was handed over as one.
    assert find_environment(str(tmp_path / "env"), ["bin"]) is None
