"""Packages in layers (docs/layout.md, "Layers"), checked from the source: an AST walk
of every module's imports, those inside functions and `TYPE_CHECKING` blocks included.
A package imports only itself and the packages below it; the transports stand side by
side on the HTTP layer and never import each other. And the tests mirror the packages
(docs/layout.md, "Tests"): each test module in the folder of its part."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),  # the one typed error every layer raises
    ("db",),  # SQL, one module per aggregate; the pool; the embedded server
    ("domain",),  # the rules: times, recurrence, expansion, capacity, notifications, sync
    ("graph",),  # the Strawberry schema, its resolvers and dataloaders, plans
    ("registry",),  # each public operation declared once, and running it
    ("web",),  # the one HTTP layer: credentials, rate limits, request ids, errors
    ("rest_bridge", "mcp_bridge", "graph_bridge", "oauth_bridge"),  # the transports
    ("kalends",),  # the app's wiring, the command line
)
RANK = {package: rank for rank, packages in enumerate(LAYERS) for package in packages}
PACKAGES = tuple(RANK)
REPOSITORY = "repository"
"""The folder of tests of the repository as a whole (these layers, lint and types,
packaging, the README and docs/, the suite and its harnesses) beside one per package."""


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def violations(root: Path) -> list[str]:
    """Every import of a package at or above the importing one's layer (itself aside)."""
    wrong = []
    for package, rank in RANK.items():
        for path in sorted((root / package).rglob("*.py")):
            module = ".".join(path.relative_to(root).with_suffix("").parts)
            for line, name in _imported(ast.parse(path.read_text())):
                top = name.split(".")[0]
                if top in RANK and top != package and RANK[top] >= rank:
                    wrong.append(f"{module}:{line} imports {name}")
    return sorted(wrong)


def test_packages_import_only_the_layers_below_them() -> None:
    assert violations(ROOT) == []


def test_an_upward_or_sideways_import_is_caught(tmp_path: Path) -> None:
    sources = {
        "core/errors.py": "",
        "db/events.py": "from core.errors import ApiError\n",  # down: allowed
        "db/accounts.py": "def f() -> None:\n    from domain import auth\n",  # up, in a function
        "domain/auth.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                          "    from graph.context import Context\n",
        "graph/context.py": "",
        "registry/__init__.py": "import web.services\n",
        "web/services.py": "",
        "rest_bridge/routes.py": "from mcp_bridge import tools\n",  # sideways
        "mcp_bridge/tools.py": "from registry import OPERATIONS\n",  # down: allowed
        "kalends/cli.py": "from rest_bridge import routes\n",  # down: allowed
    }
    for name, source in sources.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    assert violations(tmp_path) == [
        "db.accounts:2 imports domain",
        "domain.auth:3 imports graph.context",
        "registry.__init__:1 imports web.services",
        "rest_bridge.routes:1 imports mcp_bridge",
    ]


def unnamed_modules(root: Path) -> list[str]:
    """The modules that their package's row of docs/layout.md does not name (as `name`
    or `name.py`); registry/operations/ is named as a whole."""
    rows = dict(re.findall(r"^\| `([^`]+)` \| (.*) \|$", (root / "docs" / "layout.md").read_text(),
                           re.MULTILINE))
    unnamed = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            folder = path.parent.relative_to(root).as_posix()
            named = set(re.findall(r"`([A-Za-z_]+)(?:\.py)?`", rows.get(f"{folder}/", "")))
            if path.stem not in ("__init__", "__main__", *named) \
                    and folder != "registry/operations":
                unnamed.append(path.relative_to(root).as_posix())
    return unnamed


def test_the_layout_names_every_module() -> None:
    assert unnamed_modules(ROOT) == []


def misplaced_tests(tests: Path) -> list[str]:
    """Every test module not directly in a folder of `tests` named after a package or
    REPOSITORY, in one whose `__init__.py` would make `tests/db` the package `db`, or
    named as another is (a test module imports another's helpers by its name alone)."""
    wrong, seen = [], set()
    for path in sorted(tests.rglob("test_*.py")):
        name = path.relative_to(tests).as_posix()
        folder = path.parent.relative_to(tests).as_posix()
        if folder not in (*PACKAGES, REPOSITORY):
            wrong.append(f"{name}: not in a folder named after a part")
        elif (path.parent / "__init__.py").exists():
            wrong.append(f"{name}: its folder has an __init__.py")
        if path.name in seen:
            wrong.append(f"{name}: a second {path.name}")
        seen.add(path.name)
    return wrong


def test_every_test_is_in_the_folder_of_its_part() -> None:
    assert misplaced_tests(ROOT / "tests") == []


def test_a_misplaced_test_is_caught(tmp_path: Path) -> None:
    for name in ("db/test_migrations.py", "repository/test_layout.py", "test_left.py",
                 "helpers/test_of_a_helper.py", "domain/connected/test_deeper.py",
                 "web/__init__.py", "web/test_metrics.py", "graph/test_migrations.py"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    assert misplaced_tests(tmp_path) == [
        "domain/connected/test_deeper.py: not in a folder named after a part",
        "graph/test_migrations.py: a second test_migrations.py",
        "helpers/test_of_a_helper.py: not in a folder named after a part",
        "test_left.py: not in a folder named after a part",
        "web/test_metrics.py: its folder has an __init__.py",
    ]
