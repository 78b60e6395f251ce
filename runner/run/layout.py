"""The warehouse's state layout: the version this release writes (recorded on the run ledger), the
migrations that bring a warehouse of an earlier layout to it, and the refusal of a newer one
(docs/operations.md "Upgrading")."""

from __future__ import annotations

from runner.errors import InfrastructureError, UsageError

# The layout this release writes: the raw table's, the ledger's and the watermark table's columns
# and records, the landed-file records, the Kafka offsets rows, the staging tables and marts.
# A release that changes any of them in a way an earlier release's warehouse cannot be read as
# it is adds one to LAYOUT, a migration from the layout before it, and a fixture of its layout
# (tests/state_fixture.py).
LAYOUT = 2

# The ledger's table property that records the layout (absent: a warehouse written before the
# layout was recorded, layout 0).
PROPERTY = "sqlserver_cdc.state_layout"

# From layout k to k + 1: the dbt operation (a macro of the package, no arguments) that migrates
# a warehouse in place, run before anything of the run is read or landed. Layout 0 has none: what
# releases before layout 1 wrote is read as it is, and the changes they lack are made in place
# where they are used (open_run adds the ledger's and the watermark table's later columns; the
# first landing writes the landed-file records of the files landed before).
MIGRATIONS: dict[int, str] = {
    # several databases (docs/tables.md "Several databases"): the raw table's and the metadata
    # staging tables' source_database, the ledger's per-table source_database, the Debezium
    # events' source_server; a one-database warehouse's rows are the default database's as they are
    1: "sqlserver_cdc.migrate_to_layout_2",
}


def recorded(value: str | int | None) -> int:
    """The layout a ledger's property records (None: no property, layout 0)."""
    if value is None or value == "":
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        raise UsageError(f"the run ledger records the state layout {value!r}, which is not a layout number: "
                         f"the table property {PROPERTY} was changed by hand; set it to the layout the "
                         "warehouse was written with") from None


def migrations(found: int, ledger: str, current: int | None = None,
               steps: dict[int, str] | None = None) -> list[str]:
    """The migrations that bring a warehouse of layout `found` (its ledger `ledger`) to `current`,
    in order; refuses a warehouse of a newer layout, which this release does not know how to read
    or write (nothing was changed in it)."""
    current = LAYOUT if current is None else current
    steps = MIGRATIONS if steps is None else steps
    if found > current:
        raise UsageError(
            f"the warehouse of {ledger} has state layout {found}, written by a newer release of sqlserver_cdc; this "
            f"release writes layout {current} and cannot read it: run it with the release that wrote it (or a "
            "newer one). Nothing was landed or changed (docs/operations.md \"Upgrading\")")
    return [steps[k] for k in range(found, current) if k in steps]


def open_warehouse(dbt, raw_schema: str, files: list[str]) -> dict[str, object]:
    """The first dbt invocation of a run or a landing (macro open_run, which creates what is missing
    and reports the last batch and which of `files` landed), on a warehouse of this release's
    layout: an older one is migrated first and its ledger records LAYOUT; a newer one is refused
    before anything is written. Returns open_run's report."""
    args = {"raw_schema": raw_schema, "files": files, "layout": LAYOUT}
    opened = dbt.operation("sqlserver_cdc.open_run", args).get("open_run")
    if opened is None:
        raise InfrastructureError("open_run reported nothing: is the project's sqlserver_cdc package current?")
    found = recorded(opened.get("layout"))
    if found == LAYOUT:
        return opened
    steps = migrations(found, str(opened.get("ledger")))
    for macro in steps:
        dbt.operation(macro, {})
    dbt.operation("sqlserver_cdc.record_layout", {"layout": LAYOUT})
    return dbt.operation("sqlserver_cdc.open_run", args).get("open_run") if steps else {**opened, "layout": LAYOUT}
