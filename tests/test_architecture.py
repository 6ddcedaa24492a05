"""The house plan of docs/architecture.md, checked: every import in src/cafleet (those
inside functions too) goes down the layers, and no two modules import each other, however
indirectly.

Layers, top to bottom: ``cli`` (the entry point) and ``web`` → ``delivery`` → ``broker`` →
``store``; ``mux`` and ``agents`` are leaves that ``delivery`` (and ``cli``) may use. The
top-level modules (``clock``, ``errors``, ``faults``, ``render``, ``validation``) and the
``config`` package are the shared base every layer may import; they import only each other.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "cafleet"

BASE = "base"  # the top-level modules
BASE_PACKAGES = {"config"}  # packages that belong to the shared base (the settings)
# The layers each one may import (besides itself and the base).
ALLOWED: dict[str, set[str]] = {
    "cli": {"web", "delivery", "broker", "store", "mux", "agents"},
    "web": {"delivery", "broker", "store"},
    "delivery": {"broker", "store", "mux", "agents"},
    "broker": {"store"},
    "store": set(),
    "mux": set(),
    "agents": set(),
    BASE: set(),
}
ENTRY_POINTS = {"cafleet.__main__": {"cli"}}  # `python -m cafleet` runs the command line

# The store's engine modules: above store/ only its face is imported (the package, the chooser
# store/engines.py, and what is the same for every engine: the schema, the interface, the
# change waiter, the diagnosis's refusal), never an engine (docs/architecture.md).
ENGINE_MODULES = {
    "cafleet.store.sqlite",
    "cafleet.store.sqlite_driver",
    "cafleet.store.sqlite_faults",
    "cafleet.store.sqlite_locks",
    "cafleet.store.wal",
    "cafleet.store.postgres",
    "cafleet.store.libpq",
}
# A test of a location's scheme: the name of the one test, or a string that starts a
# PostgreSQL URL. Only store/ asks which engine a location names; config/__init__.py (the
# shared base, which may import no layer) keeps its own one-line test to pass a URL through
# unresolved.
LOCATION_TEST_ALLOWED = {"cafleet.config"}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the module at ``path``: the checks below walk the whole tree each, and
    a text is parsed once a run."""
    return _walked(path.read_text(), str(path))


@functools.cache
def _walked(source: str, filename: str) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(ast.parse(source, filename)))


def resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The cafleet module an imported name denotes (a module, or the module defining it)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every cafleet module ``module`` imports, at any depth of its code (a relative import
    is resolved against the module's package)."""
    found = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in nodes(path):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{alias.name}" for alias in node.names] or [base]
        for name in names:
            target = resolve(name, modules)
            if target is not None and target != module:
                found.add(target)
    return found


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) >= 2 and (PACKAGE / parts[1]).is_dir() and parts[1] not in BASE_PACKAGES:
        return parts[1]
    return BASE


def graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {module: imports_of(module, path, modules) for module, path in modules.items()}


def direction_problems(edges: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, targets in sorted(edges.items()):
        if module == "cafleet":
            allowed = set()
        else:
            allowed = ENTRY_POINTS.get(module, ALLOWED[layer(module)]) | {layer(module), BASE}
        for target in sorted(targets):
            if target == "cafleet":
                continue  # the package itself holds nothing but its version
            if layer(target) not in allowed:
                problems.append(f"{module} imports {target} ({layer(module)} -> {layer(target)})")
    return problems


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return groups


def test_every_module_is_in_a_known_layer():
    unknown = {layer(module) for module in all_modules()} - set(ALLOWED)
    assert unknown == set(), f"add these packages to docs/architecture.md and ALLOWED: {unknown}"


def test_the_settings_package_is_in_the_base():
    """``config/`` is a package but no layer of its own: its modules are the base's, and
    import the base alone."""
    config = {module for module in all_modules() if module.split(".")[:2] == ["cafleet", "config"]}
    assert "cafleet.config.declarations" in config
    assert {layer(module) for module in config} == {BASE}


def test_imports_go_down_the_layers():
    assert direction_problems(graph()) == []


def test_no_module_imports_itself_through_others():
    assert cycles(graph()) == []


def test_an_import_inside_a_function_counts(tmp_path):
    """The checks see what a hidden import does: the cycle this test suite was written to
    catch was an import inside a function."""
    package = tmp_path / "cafleet"
    (package / "broker").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "broker" / "__init__.py").write_text("")
    (package / "broker" / "a.py").write_text("from cafleet.broker import b\n")
    (package / "broker" / "b.py").write_text(
        "def f():\n    from cafleet.broker import a\n    from cafleet.cli import x\n"
    )
    modules = {
        "cafleet.broker.a": package / "broker" / "a.py",
        "cafleet.broker.b": package / "broker" / "b.py",
        "cafleet.cli.x": package / "cli" / "x.py",
    }
    edges = {m: imports_of(m, p, modules) for m, p in modules.items() if p.exists()}
    assert cycles(edges) == [["cafleet.broker.a", "cafleet.broker.b"]]
    assert direction_problems(edges) == ["cafleet.broker.b imports cafleet.cli.x (broker -> cli)"]


def engine_imports(edges: dict[str, set[str]]) -> list[str]:
    """Every import of an engine module by a module outside store/."""
    inside = tuple(name + "." for name in ENGINE_MODULES)  # a module of an engine's package
    return [
        f"{module} imports {target}"
        for module, targets in sorted(edges.items())
        if layer(module) != "store"
        for target in sorted(targets)
        if target in ENGINE_MODULES or target.startswith(inside)
    ]


def location_tests(module: str, path: Path) -> list[str]:
    """Where a module outside store/ tests a location's scheme itself: a name
    ``is_postgres_url`` (called, imported or passed) or a string literal that starts a
    PostgreSQL URL (``startswith("postgres")`` and its kin)."""
    found = []
    for node in nodes(path):
        if (isinstance(node, ast.Name) and node.id == "is_postgres_url") or (
            isinstance(node, ast.Attribute) and node.attr == "is_postgres_url"
        ):
            found.append(f"{module}:{node.lineno} names is_postgres_url")
        elif isinstance(node, ast.alias) and node.name == "is_postgres_url":
            found.append(f"{module}:{node.lineno} imports is_postgres_url")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("postgres"):
            found.append(f"{module}:{node.lineno} tests a location with {node.value!r}")
    return found


def test_no_engine_module_is_imported_above_the_store():
    assert engine_imports(graph()) == []


def test_no_location_is_tested_for_its_engine_above_the_store():
    found = []
    for module, path in all_modules().items():
        if layer(module) != "store" and module not in LOCATION_TEST_ALLOWED:
            found += location_tests(module, path)
    assert found == []


def test_the_engine_checks_see_what_they_forbid(tmp_path):
    """Both checks fail on the shapes they forbid, inside a function too."""
    source = tmp_path / "probe.py"
    source.write_text(
        "def f(location):\n"
        "    from cafleet.store import is_postgres_url\n"
        "    from cafleet.store.postgres.locks import AdvisoryLock\n"
        "    return location.startswith(('postgresql://', 'postgres://')) or is_postgres_url(location)\n"
    )
    modules = {"cafleet.delivery.probe": source, "cafleet.store.postgres.locks": source, "cafleet.store": source}
    edges = {"cafleet.delivery.probe": imports_of("cafleet.delivery.probe", source, modules)}
    assert engine_imports(edges) == ["cafleet.delivery.probe imports cafleet.store.postgres.locks"]
    assert sorted(location_tests("cafleet.delivery.probe", source)) == [
        "cafleet.delivery.probe:2 imports is_postgres_url",
        "cafleet.delivery.probe:4 names is_postgres_url",
        "cafleet.delivery.probe:4 tests a location with 'postgres://'",
        "cafleet.delivery.probe:4 tests a location with 'postgresql://'",
    ]


@pytest.mark.parametrize("name", ["architecture.md"])
def test_the_plan_is_written_down(name):
    text = (SRC.parent / "docs" / name).read_text()
    for package in ALLOWED:
        if package != BASE:
            assert f"`{package}`" in text, f"docs/{name} does not describe `{package}`"


def test_tests_share_helpers_through_support_only():
    """A test module imports helpers from tests/support/, never from another test module
    (whose fixtures and collection would come along)."""
    tests = Path(__file__).resolve().parent
    offenders = []
    for path in sorted(tests.rglob("*.py")):
        for node in nodes(path):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            )
            offenders += [
                f"{path.relative_to(tests)} imports {name}"
                for name in names
                if name.startswith("tests.test_") or name.startswith("test_")
            ]
    assert offenders == []


def test_each_usage_reader_builds_on_the_shared_module_only():
    """Each agent's usage reader (``agents/usage/<agent>.py``) builds on the shared
    accumulator (``totals.py``), never on another agent's reader, and the shared module
    imports none of them: an agent's record format lives in its own room."""
    edges = graph()
    readers = {f"cafleet.agents.usage.{agent}" for agent in ("claude", "codex", "opencode")}
    assert readers <= set(edges)
    assert edges["cafleet.agents.usage.totals"] & (readers | {"cafleet.agents.previews"}) == set()
    for reader in sorted(readers):
        assert edges[reader] & (readers - {reader}) == set(), reader


def test_no_hook_point_is_guarded():
    """The hooks are a null object (``faults.NO_HOOKS``) for every command the product runs,
    never None: a point calls them, it does not ask whether there are any."""
    found = []
    for module, path in all_modules().items():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "hooks is not None" in line or "hooks is None" in line:
                found.append(f"{module}:{number}")
    assert found == []


def store_hook_reads(module: str, path: Path) -> list[str]:
    """Where a module reaches the test hooks through a store (``store.hooks``,
    ``self.store.hooks``): above store/ they come from the command's context, as arguments."""
    found = []
    for node in nodes(path):
        if isinstance(node, ast.Attribute) and node.attr == "hooks":
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name == "store":
                found.append(f"{module}:{node.lineno} reads store.hooks")
    return found


def test_the_hooks_come_from_the_command_not_the_store():
    """The Store interface is only about data: no ``hooks`` on it, and no module above
    store/ reaches the hooks through a store (docs/architecture.md, "The Store seam")."""
    from cafleet.store.protocol import Store

    assert "hooks" not in Store.__annotations__
    found = []
    for module, path in all_modules().items():
        if not module.startswith("cafleet.store"):
            found += store_hook_reads(module, path)
    assert found == []


def test_a_hook_read_through_a_store_is_found(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text(
        "def f(store, self):\n    store.hooks.pause('x')\n    self.store.hooks.trace('y')\n    hooks.pause('z')\n"
    )
    assert store_hook_reads("cafleet.delivery.probe", source) == [
        "cafleet.delivery.probe:2 reads store.hooks",
        "cafleet.delivery.probe:3 reads store.hooks",
    ]


PANE_VARIABLES = {"CAFLEET_HOST", "CAFLEET_MEMBER_ID", "CAFLEET_DATABASE_URL"}


def pane_variable_reads(module: str, path: Path) -> list[str]:
    """Where a module reads one of the pane's variables by name from a mapping
    (``environ.get("CAFLEET_HOST")``, ``environ["CAFLEET_MEMBER_ID"]``); writing one as a
    key of a new pane's environment is not a read."""
    found = []
    for node in nodes(path):
        key = None
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
        ):
            key = node.args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = node.slice
        if isinstance(key, ast.Constant) and key.value in PANE_VARIABLES:
            found.append(f"{module}:{node.lineno} reads {key.value}")
    return found


def test_the_pane_variables_are_read_through_the_settings_below_the_command_line():
    """``CAFLEET_HOST``, ``CAFLEET_MEMBER_ID`` and ``CAFLEET_DATABASE_URL`` are read by
    ``config.Settings`` (``host``, ``member_id``, ``database_url``) and the readers beside
    it; below cli/ nothing reads them by name."""
    found = []
    for module, path in all_modules().items():
        if layer(module) not in ("cli", BASE):
            found += pane_variable_reads(module, path)
    assert found == []


def test_the_pane_variable_check_sees_what_it_forbids(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text(
        "def f(environ):\n"
        "    env = {'CAFLEET_MEMBER_ID': '1'}\n"
        "    return environ.get('CAFLEET_HOST', ''), environ['CAFLEET_DATABASE_URL'], env\n"
    )
    assert pane_variable_reads("cafleet.delivery.probe", source) == [
        "cafleet.delivery.probe:3 reads CAFLEET_HOST",
        "cafleet.delivery.probe:3 reads CAFLEET_DATABASE_URL",
    ]


MODULE_LINES = 650  # a module longer than this holds more than one job (docs/architecture.md)
FUNCTION_LINES = 60  # from its def to its last line


def oversized(modules: dict[str, Path]) -> list[str]:
    """Every module over :data:`MODULE_LINES` lines and every function over
    :data:`FUNCTION_LINES` (a nested function counts inside its own too)."""
    found = []
    for module, path in modules.items():
        lines = path.read_text().count("\n")
        if lines > MODULE_LINES:
            found.append(f"{module}: {lines} lines")
        for node in nodes(path):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES:
                    found.append(f"{module}:{node.lineno} {node.name}: {length} lines")
    return found


def test_modules_and_functions_stay_small():
    assert oversized(all_modules()) == []


def test_an_oversized_module_and_function_are_found(tmp_path):
    source = tmp_path / "probe.py"
    body = "".join(f"    x{i} = {i}\n" for i in range(FUNCTION_LINES))
    source.write_text("def long():\n" + body + "\n" * (MODULE_LINES - FUNCTION_LINES))
    assert oversized({"cafleet.probe": source}) == [
        f"cafleet.probe: {MODULE_LINES + 1} lines",
        f"cafleet.probe:1 long: {FUNCTION_LINES + 1} lines",
    ]


def test_the_module_map_is_the_trees():
    """docs/architecture.md's module map is what scripts/module_map.py writes from the
    tree: every module, with the first sentence of its own docstring."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("module_map", SRC.parent / "scripts" / "module_map.py")
    assert spec is not None and spec.loader is not None
    module_map = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module_map)
    document = (SRC.parent / "docs" / "architecture.md").read_text()
    assert module_map.replace(document) == document, (
        "run: python scripts/module_map.py --write-readme docs/architecture.md"
    )
    assert all(text for _module, text in module_map.rows()), "a module without a docstring"
