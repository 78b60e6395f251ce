"""One SparkSession for the whole test session, with its own metastore and warehouse, and
helpers to run the pipeline and compile macros through the real dbt project."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

PROJECT_DIR = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"

_STATE = Path(tempfile.mkdtemp(prefix="sqlserver_cdc_tests_"))
os.environ["SQLSERVER_CDC_STATE_DIR"] = str(_STATE / "state")


@pytest.fixture(scope="session")
def spark():
    from runner.profile import load_target
    from runner.session import create_session

    session = create_session(load_target(PROJECT_DIR, "local"), PROJECT_DIR)
    yield session
    session.stop()
    shutil.rmtree(_STATE, ignore_errors=True)


class Pipeline:
    """A pipeline in its own schema and landing folder, on the shared session."""

    def __init__(self, spark, schema: str, landing: Path, project_dir: Path = PROJECT_DIR):
        from runner.profile import load_target

        self.spark = spark
        self.schema = schema
        self.landing = landing
        self.project_dir = project_dir
        os.environ["SQLSERVER_CDC_SCHEMA"] = schema
        self.target = load_target(PROJECT_DIR, "local")

    def run(self, **kwargs) -> list[dict]:
        from runner.cli import run_pipeline

        os.environ["SQLSERVER_CDC_SCHEMA"] = self.schema
        return run_pipeline(self.spark, self.project_dir, self.target, self.landing, **kwargs)

    def rows(self, sql: str) -> list[dict]:
        return [r.asDict(recursive=True) for r in self.spark.sql(sql.format(s=self.schema)).collect()]

    def table(self, name: str, order_by: str) -> list[dict]:
        return self.rows(f"select * from {{s}}.{name} order by {order_by}")


@pytest.fixture
def pipeline(spark, tmp_path):
    schema = "t_" + uuid.uuid4().hex[:8]
    landing = tmp_path / "landing"
    landing.mkdir()
    return Pipeline(spark, schema, landing)


def compile_sql(sql: str, vars: dict | None = None, project_dir: Path = PROJECT_DIR) -> str:
    """Compiles a Jinja SQL snippet in the project (its macros available) to plain Spark SQL."""
    from dbt.cli.main import dbtRunner

    args = ["--quiet", "--log-level", "none", "compile", "--inline", sql, "--project-dir", str(project_dir),
            "--profiles-dir", str(project_dir), "--target", "local"]
    if vars:
        args += ["--vars", json.dumps(vars)]
    result = dbtRunner().invoke(args)
    if not result.success:
        cause = result.exception.__context__ or result.exception
        raise AssertionError(f"dbt compile failed: {cause}")
    return result.result.results[0].node.compiled_code


@pytest.fixture(scope="session")
def render(spark):
    """Compile a Jinja SQL snippet and run it on the shared session; rows as dicts."""

    def _render(sql: str, vars: dict | None = None, project_dir: Path = PROJECT_DIR) -> list[dict]:
        return [r.asDict(recursive=True) for r in spark.sql(compile_sql(sql, vars, project_dir)).collect()]

    return _render


STAGING_MACROS = {"change_tables": "stage_change_table"}


def copy_project(destination: Path, extra_tables: dict[str, dict]) -> Path:
    """A copy of the project with more tracked tables declared and their thin model files added,
    exactly as README's "Declaring a tracked table" tells a user to do."""
    import yaml

    skipped = {".venv", ".state", "landing", "target", "logs", "tests", ".git", "bench"}

    def ignore(folder: str, names: list[str]) -> list[str]:
        top = Path(folder) == PROJECT_DIR
        return [n for n in names if (top and n in skipped) or n.endswith(".egg-info") or n == "__pycache__"]

    shutil.copytree(PROJECT_DIR, destination, ignore=ignore)
    config = yaml.safe_load((destination / "dbt_project.yml").read_text())
    config["vars"]["cdc_tracked_tables"].update(extra_tables)
    (destination / "dbt_project.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    for name, table in extra_tables.items():
        (destination / "models/staging" / table["channel"] / f"stg_{table['channel']}__{name}.sql").write_text(
            f"{{{{ sqlserver_cdc.{STAGING_MACROS[table['channel']]}('{name}') }}}}\n")
        (destination / "models/marts" / name).mkdir(parents=True, exist_ok=True)
        (destination / "models/marts" / name / f"{name}_current.sql").write_text(
            f"{{{{ sqlserver_cdc.current_state('{name}') }}}}\n")
        (destination / "models/marts" / name / f"{name}_history.sql").write_text(
            f"{{{{ sqlserver_cdc.history('{name}') }}}}\n")
    return destination
