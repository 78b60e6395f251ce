"""The layout's rules, read from the source with `ast` (imports inside functions included):
`runner` (the pipeline core users deploy) imports neither the simulator (`cdc_simulator`) nor the
tooling (`cdc_tooling`), which build on it; no two modules import each other, directly or around
a longer cycle; test modules sit in folders mirroring the code and never import each other."""

from __future__ import annotations

import ast
import re

from tests.conftest import PROJECT_DIR

PACKAGES = ("runner", "cdc_simulator", "cdc_tooling")
CORE = "runner"


def _modules() -> dict[str, ast.Module]:
    found = {}
    for package in PACKAGES:
        for path in sorted((PROJECT_DIR / package).rglob("*.py")):
            parts = path.relative_to(PROJECT_DIR).with_suffix("").parts
            name = ".".join(parts[:-1] if path.stem == "__init__" else parts)
            found[name] = ast.parse(path.read_text(), filename=str(path))
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports (`from pkg import mod` counts as pkg.mod)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, tree in modules.items():
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                           for alias in node.names]
            for target in targets:
                if target.split(".")[0] in PACKAGES and target != name:
                    graph[name].add(target if target in modules else target.split(".")[0])
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_core_imports_no_tooling_and_no_modules_import_each_other():
    graph = import_graph()
    assert {"runner.run.cli", "runner.sources.kafka", "cdc_simulator.simulate", "cdc_tooling.bench"} <= set(graph)
    outward = sorted(f"{a} -> {b}" for a, targets in graph.items() if a.split(".")[0] == CORE
                     for b in targets if b.split(".")[0] != CORE)
    assert outward == [], "the runner imports the simulator or the tooling"
    assert _cycles(graph) == [], "modules import each other"
    # the rule has teeth: the tooling does build on the core
    assert "runner.run.cli" in graph["cdc_tooling.bench"] and "runner.project.config" in graph["cdc_simulator.tables"]


def test_the_checker_sees_cycles_and_function_level_imports():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    tree = ast.parse("def f():\n    from cdc_tooling import bench\n")
    assert any(isinstance(n, ast.ImportFrom) and n.module == "cdc_tooling" for n in ast.walk(tree))


def test_test_modules_share_helpers_not_each_other():
    """Tests mirror the code (macros, channels, pipeline, tooling) and share what they need through
    conftest and the helper modules beside it, never by importing another test module."""
    tests = PROJECT_DIR / "tests"
    helpers = {"tests.conftest", "tests.expected", "tests.scenarios", "tests.reference_cdc", "tests.state_fixture"}
    assert sorted(p.name for p in tests.iterdir() if p.is_dir() and (p / "__init__.py").exists()) == [
        "channels", "macros", "pipeline", "tooling"]
    offenders = []
    for path in sorted(tests.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tests.")
                    and node.module not in helpers):
                offenders.append(f"{path.relative_to(tests)} imports {node.module}")
    assert offenders == []
    assert not list(tests.glob("test_*.py")), "a test module outside the layout's folders"


def _slug(title: str) -> str:
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def test_readme_maps_every_doc_page_and_topic_and_every_link_resolves():
    """A newcomer goes from README to any topic in one link: README links every page of docs/ and
    every section of each; every relative link of README and docs/ names an existing file and,
    with an anchor, an existing heading of it."""
    docs = sorted((PROJECT_DIR / "docs").glob("*.md"))
    assert len(docs) >= 6
    headings = {}
    for page in [PROJECT_DIR / "README.md", *docs]:
        fenced, found = False, set()
        for line in page.read_text().split("\n"):
            fenced = fenced != line.startswith("```")
            if not fenced and re.match(r"^#{1,4} ", line):
                found.add(_slug(line.lstrip("#")))
        headings[page.resolve()] = found
    readme = (PROJECT_DIR / "README.md").read_text()
    linked = set(re.findall(r"\]\((docs/[^)#]+\.md)(?:#([^)]+))?\)", readme))
    for page in docs:
        relative = f"docs/{page.name}"
        assert (relative, "") in linked, f"README does not link {relative}"
        for slug in headings[page.resolve()] - {_slug(page.read_text().split(chr(10))[0].lstrip("#"))}:
            assert (relative, slug) in linked, f"README's map lacks {relative}#{slug}"
    broken = []
    for page in [PROJECT_DIR / "README.md", *docs]:
        for target, anchor in re.findall(r"\]\(([^)#:\s]*)(?:#([^)\s]+))?\)", page.read_text()):
            file = (page.parent / target).resolve() if target else page.resolve()
            if not file.exists() or (anchor and file.suffix == ".md" and anchor not in headings.get(file, set())):
                broken.append(f"{page.name}: ({target}#{anchor})")
    assert broken == []


# public macros that are Jinja only (values, relations, declarations), portable as they are
JINJA_ONLY = {"channel_declared", "check_scope", "debezium_encoding", "declared_scale", "fraction_digits",
              "ledger_relation", "watermark_relation", "maintenance_relation", "operation_codes", "tracked_table",
              "tracked_table_for_capture_instance"}
PORTABLE_DEFAULT = {"column_ordinal", "operation_number"}  # ANSI SQL or Jinja: default__ is the body
DBT_OVERRIDES = {"get_where_subquery"}  # dbt's own dispatch, specialised for Spark


def test_public_macros_with_sql_dispatch_to_spark_bodies_and_refuse_other_adapters():
    import yaml

    macros_dir = PROJECT_DIR / "macros"
    public = {m["name"] for m in yaml.safe_load((macros_dir / "_macros.yml").read_text())["macros"]}
    bodies: dict[str, str] = {}
    for path in macros_dir.rglob("*.sql"):
        for m in re.finditer(r"{%-?\s*macro\s+(\w+)\(.*?\)\s*-?%}(.*?){%-?\s*endmacro", path.read_text(), re.DOTALL):
            bodies[m.group(1)] = m.group(2)
    problems = []
    for name in sorted(public):
        if name.startswith(("test_", "spark__", "materialization_")) or name in JINJA_ONLY:
            continue
        if f"adapter.dispatch('{name}', 'sqlserver_cdc')" not in bodies.get(name, ""):
            problems.append(f"{name} does not dispatch")
        elif name not in PORTABLE_DEFAULT and (f"spark__{name}" not in bodies
                                               or f"_not_supported('{name}')" not in bodies.get(f"default__{name}", "")):
            problems.append(f"{name}: no spark__ body, or its default__ does not refuse other adapters")
    for name in bodies:
        if name.startswith("spark__") and name[len("spark__"):] not in DBT_OVERRIDES | public:
            problems.append(f"{name} is the Spark body of an undocumented macro")
    assert problems == []
    assert len([n for n in bodies if n.startswith("spark__")]) > 40


MAX_MACRO_LINES = 150


def test_no_macro_is_over_150_lines():
    """A long transformation is a sequence of named step macros (STYLE.md; macros/staging/
    _staging_helpers.sql is the example): no macro, from its `{% macro %}` line to its
    `{% endmacro %}` line, is over 150 lines."""
    macros_dir = PROJECT_DIR / "macros"
    lengths = {}
    for path in sorted(macros_dir.rglob("*.sql")):
        text = path.read_text()
        for m in re.finditer(r"{%-?\s*macro\s+(\w+).*?{%-?\s*endmacro\s*-?%}", text, re.DOTALL):
            lengths[f"{path.relative_to(PROJECT_DIR)}: {m.group(1)}"] = m.group(0).count("\n") + 1
    assert len(lengths) > 100
    offenders = [f"{name} is {n} lines" for name, n in sorted(lengths.items()) if n > MAX_MACRO_LINES]
    assert offenders == [], f"macros over {MAX_MACRO_LINES} lines (split them into step macros): {offenders}"
