"""Writes the state fixture of this release's state layout (runner/run/layout.py LAYOUT):
tests/fixtures/state/layout-<N>.tar.gz, which tests/pipeline/test_upgrade.py resumes with the
current code (docs/operations.md "Upgrading"). Run it once per new layout, on the release that
writes it, and keep every earlier fixture:

    .venv/bin/python -m tests.state_fixture      # about a minute; a Spark and a metastore of its own

The fixture is a warehouse two runs old on the change-table demo tables (a Parquet and a CSV
export, the lsn_time_mapping, captured columns): every Delta table of the target and raw schemas
(marts, staging, seeds, ledger, watermarks, the raw table with its landed-file records) as
folders, the catalog that names them (`catalog.json`: each table's folder, each view's SQL: the
metastore itself is Derby's binary files and holds absolute paths, so the test registers the
folders in its own), the landing folder the runs landed from, a third batch's exports not landed
yet (`pending/`), and the marts the reference expects once that batch is applied
(`expected.json`, values in the plain form of `plain`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "state"
SEED, TRANSACTIONS, LANDED = 47, 48, (20, 36)  # batch b1: [0, 20), b2: [20, 36), pending b3: the rest


def schema(layout: int) -> str:
    """The fixture's target schema (its raw schema is `<schema>_raw`)."""
    return f"state_layout{layout}"


def path(layout: int) -> Path:
    return FIXTURES / f"layout-{layout}.tar.gz"


def plain(value: object) -> object:
    """A mart value in a form JSON keeps and compares exactly (decimals without trailing zeros)."""
    if isinstance(value, Decimal):
        return format(value.normalize(), "f")
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    return value


def _settle(folder: Path) -> None:
    """Whole-second modification times, which a tar archive keeps exactly (the landed-file
    records compare them)."""
    for file in folder.rglob("*"):
        if file.is_file():
            seconds = int(file.stat().st_mtime)
            os.utime(file, (seconds, seconds))


def _catalog(spark, schemas: list[str], warehouse: Path) -> list[dict]:
    entries = []
    for name in schemas:
        for row in spark.sql(f"show tables in {name}").collect():
            if row.isTemporary:
                continue
            detail = {r.col_name: r.data_type for r in spark.sql(f"describe table extended {name}.{row.tableName}").collect()}
            if detail.get("Type") == "VIEW":
                sql = spark.sql(f"show create table {name}.{row.tableName}").collect()[0][0]
                entries.append({"schema": name, "name": row.tableName, "view": sql})
            else:
                location = Path(detail["Location"].removeprefix("file:"))
                entries.append({"schema": name, "name": row.tableName,
                                "folder": str(location.relative_to(warehouse))})
    return entries


def write(layout: int) -> Path:
    from cdc_simulator import landing_writer
    from cdc_simulator.simulate import Simulator
    from runner.spark.profile import load_target
    from runner.spark.session import create_session
    from tests.conftest import EVENT_TABLES, PROJECT_DIR, Pipeline, copy_project
    from tests.expected import current_state, history
    from tests.scenarios import CHANGE_TABLES, FORMATS, land_changes

    work = Path(tempfile.mkdtemp(prefix="sqlserver_cdc_state_fixture_"))
    os.environ["SQLSERVER_CDC_STATE_DIR"] = str(work / "state")
    project = copy_project(work / "project", {}, drop=EVENT_TABLES)
    spark = create_session(load_target(PROJECT_DIR, "local"), PROJECT_DIR)
    try:
        root = work / "fixture"
        pipeline = Pipeline(spark, schema(layout), root / "landing", project_dir=project)
        pipeline.landing.mkdir(parents=True)
        sim = Simulator(CHANGE_TABLES, seed=SEED)
        txs = sim.run(TRANSACTIONS)
        for batch, (start, end) in (("b1", (0, LANDED[0])), ("b2", LANDED)):
            land_changes(pipeline, sim, txs[start:end], batch, first=batch == "b1")
            _settle(pipeline.landing)
            pipeline.run(strict=True)
        landing_writer.write_batch(root / "pending", "b3", CHANGE_TABLES, txs[LANDED[1]:], FORMATS)
        _settle(root / "pending")
        warehouse = work / "state" / "warehouse"
        catalog = _catalog(spark, [schema(layout), schema(layout) + "_raw"], warehouse)
        for entry in catalog:
            if "folder" in entry:
                shutil.copytree(warehouse / entry["folder"], root / "warehouse" / entry["folder"])
        upper = txs[-1].commit_lsn
        expected = {}
        for spec in CHANGE_TABLES:
            expected[f"{spec.name}_current"] = [{c: plain(v) for c, v in row.items()}
                                                for row in current_state(spec, sim.transactions, upper).values()]
            expected[f"{spec.name}_history"] = [{c: plain(v) for c, v in row.items()}
                                                for row in history(spec, sim.transactions, upper).values()]
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=PROJECT_DIR, check=False).stdout.strip()
        (root / "catalog.json").write_text(json.dumps(
            {"layout": layout, "written_by": commit, "schema": schema(layout), "relations": catalog}, indent=1) + "\n")
        (root / "expected.json").write_text(json.dumps(expected, indent=0, sort_keys=True) + "\n")
    finally:
        spark.stop()
    FIXTURES.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path(layout), "w:gz", format=tarfile.PAX_FORMAT) as archive:
        for item in sorted(root.rglob("*")):
            archive.add(item, arcname=str(item.relative_to(root)), recursive=False)
    shutil.rmtree(work, ignore_errors=True)
    return path(layout)


if __name__ == "__main__":
    from runner.run.layout import LAYOUT

    written = write(LAYOUT)
    print(f"wrote {written.relative_to(Path.cwd()) if written.is_relative_to(Path.cwd()) else written} "
          f"({written.stat().st_size / 1024:.0f} KiB)")
