"""A newcomer's first minutes (README "Quick start"): the set-up's install of this package and a
first `make demo` run print nothing that reads as a fault. Every line of the demo's output is
the runner's own (its progress lines and its summary table); set-up prints nothing at all.
Costs a new virtual environment with this package installed in it (its dependencies are the
suite's: not reinstalled) and one demo in a cold runner process, about 90 s."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import textwrap

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from runner.spark import jars
from tests.conftest import PROJECT_DIR, copy_project

# what reads as a fault or a warning, whoever wrote it
ALARMING = re.compile(r"warn|error|exception|traceback|deprecat|fail|careful|\*\*\*|!!", re.IGNORECASE)
# the runner's own lines: a progress line, the summary's table, a blank line
OURS = re.compile(r"^(\[sqlserver_cdc +[\d.]+s\] |\| |$)")


def _strangers(output: str) -> list[str]:
    return [line for line in output.splitlines() if not OURS.match(line)]


def test_the_rule_tells_our_lines_from_others():
    out = ("[sqlserver_cdc    1.2s] landing 4 files\n| tracked table | rows landed |\n\n"
           "WARNING: Using incubator modules: jdk.incubator.vector\n"
           "12:01:02  The selection criterion 'tag:cdc_audit' does not match any enabled nodes\n")
    assert _strangers(out) == ["WARNING: Using incubator modules: jdk.incubator.vector",
                               "12:01:02  The selection criterion 'tag:cdc_audit' does not match any enabled nodes"]
    assert [bool(ALARMING.search(line)) for line in _strangers(out)] == [True, False]


@pytest.mark.processes
@pytest.mark.setup
def test_set_up_and_a_first_demo_print_no_line_but_the_runners(tmp_path):
    project = copy_project(tmp_path / "clone", {})  # what a clone holds
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    # the Makefile's install step for this package (its dependencies are the suite's own)
    installed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", "-e",
                                str(project)], capture_output=True, text=True, check=False, timeout=600)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert (installed.stdout + installed.stderr).strip() == ""

    # the jars set-up fetched (the copy's runner would resolve its own jar folder otherwise)
    env = {**{k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"},
           "SQLSERVER_CDC_STATE_DIR": str(tmp_path / "state"), "SQLSERVER_CDC_JARS_DIR": str(jars.jars_dir())}
    demo = subprocess.run([sys.executable, "-m", "cdc_tooling", "demo", "--project-dir", str(project)], cwd=project,
                          env=env, capture_output=True, text=True, check=False, timeout=900)
    output = demo.stdout + demo.stderr
    assert demo.stderr == "", demo.stderr[-3000:]  # the runner writes to its standard output
    assert demo.returncode == 0, output[-3000:]
    assert _strangers(output) == [], output[-3000:]
    assert not [line for line in output.splitlines() if ALARMING.search(line)], output[-3000:]
    assert "demo done" in output and "| customers " in output


def _closure(requirements: list[Requirement]) -> set[str]:
    """The distributions these requirements install, their dependencies' with them (as installed here)."""
    seen: set[str] = set()
    todo = list(requirements)
    while todo:
        requirement = todo.pop()
        if canonicalize_name(requirement.name) in seen:
            continue
        seen.add(canonicalize_name(requirement.name))
        try:
            needs = importlib.metadata.requires(requirement.name) or []
        except importlib.metadata.PackageNotFoundError:  # an optional platform package
            continue
        for need in map(Requirement, needs):
            if need.marker is None or any(need.marker.evaluate({"extra": extra})
                                          for extra in requirement.extras or {""}):
                todo.append(need)
    return seen


def test_make_demos_install_imports_every_module_of_the_package():
    """`make demo` installs this package without its `dev` extra (the Makefile's two stamps): every
    module of runner, cdc_simulator and cdc_tooling must import with the dev extra's own
    distributions (pytest, moto, Kafka's client, Spark Connect's gRPC, pandas ...) absent. Runs in
    a subprocess that refuses to import them; about a second."""
    own = [Requirement(line) for line in importlib.metadata.requires("sqlserver-cdc")]
    runtime = _closure([r for r in own if r.marker is None])
    dev_only = _closure([r for r in own if r.marker is not None and r.marker.evaluate({"extra": "dev"})]) - runtime
    assert {"pytest", "moto", "kafka-python", "grpcio"} <= dev_only  # the rule sees the dev extra
    blocked = sorted(module for module, dists in importlib.metadata.packages_distributions().items()
                     if all(canonicalize_name(d) in dev_only for d in dists))
    script = textwrap.dedent(f"""
        import importlib, importlib.abc, pkgutil, sys
        BLOCKED = set({blocked!r})
        class Refuse(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"{{name}} is not installed by make demo (the dev extra)")
        sys.meta_path.insert(0, Refuse())
        names = []
        for package in ("runner", "cdc_simulator", "cdc_tooling"):
            module = importlib.import_module(package)
            names += [m.name for m in pkgutil.walk_packages(module.__path__, package + ".")
                      if not m.name.endswith("__main__")]
        for name in names:
            importlib.import_module(name)
        print(len(names))
    """)
    imported = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=300)
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert int(imported.stdout.split()[-1]) >= 30  # runner's, the simulator's and the tooling's modules


def test_make_installs_pyprojects_own_spark_requirements_first_and_fetches_the_jars_beside_the_rest(tmp_path):
    """The Makefile's install (its stamp's recipe, run for real with a stand-in for the virtual
    environment's python that records its calls): PySpark and Delta's Python package first, exactly
    as pyproject.toml requires them (the Makefile reads them from it) and with PySpark's wheel built
    uncompressed; then the jars' resolution and pip's install of the package at the same time (the
    stand-in's jar step waits for pip's call to begin: one after the other, it fails); a failure of
    either fails the recipe and leaves no stamp. About a second."""
    import shlex

    import tomllib  # Python 3.11's

    venv, log = tmp_path / "venv", tmp_path / "calls"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        echo "$*" >> {log}
        case "$*" in
          *runner.spark.jars*)
            i=0; until grep -q -- "-e ." {log}; do i=$((i+1)); [ $i -gt 200 ] && exit 3; sleep 0.05; done
            exit ${{FAIL_JARS:-0}};;
          *"-e ."*) exit ${{FAIL_PIP:-0}};;
        esac
        """))
    python.chmod(0o755)

    def install(**fail: str) -> subprocess.CompletedProcess:
        log.write_text("")
        (venv / ".installed").unlink(missing_ok=True)
        return subprocess.run(["make", "-s", "-C", str(PROJECT_DIR), "PYTHON=true", f"VENV={venv}", f"{venv}/.installed"],
                              capture_output=True, text=True, check=False, timeout=60, env={**os.environ, **fail})

    done = install()
    assert done.returncode == 0, done.stdout + done.stderr
    calls = log.read_text().splitlines()
    declared = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["project"]["dependencies"]
    spark_side = [r for r in declared if canonicalize_name(Requirement(r).name) in ("pyspark", "delta-spark")]
    assert len(spark_side) == 2
    assert calls[0] == "-m pip install --quiet --upgrade pip"
    assert shlex.split(calls[1]) == ["-m", "pip", "install", "--quiet",
                                     "--config-settings=--build-option=--compression=stored", *spark_side]
    assert sorted(calls[2:]) == ["-m pip install --quiet -e .", "-m runner.spark.jars"]
    assert (venv / ".installed").exists()
    for failing in ("FAIL_JARS", "FAIL_PIP"):
        failed = install(**{failing: "1"})
        assert failed.returncode != 0 and not (venv / ".installed").exists(), failing
