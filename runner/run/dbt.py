"""Invokes dbt in-process (dbtRunner), sequentially, on the SparkSession the runner created.
The project is parsed once per Dbt object (its first invocation) and the manifest is reused by
every later invocation, so a run pays dbt's parse once however many steps it takes."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from runner.errors import InfrastructureError, PipelineFailed, UsageError
from runner.run.plan import NodeResult

# the manifest of the last project parsed in this process (see Dbt.parse)
_MANIFESTS: dict[tuple, object] = {}


@dataclass
class Dbt:
    project_dir: Path
    target: str
    vars: dict[str, object] = field(default_factory=dict)
    node_log: bool = True  # dbt's line per node on the console (the runner's --verbose)
    manifest: object = None
    # what the current run is doing (runner/run/watchdog.py): told of each invocation and node
    activity: object = None

    def _args(self, command: list[str], run_vars: dict | None = None) -> list[str]:
        args = [
            *command,
            "--project-dir", str(self.project_dir),
            "--profiles-dir", str(self.project_dir),
            "--target", self.target,
        ]
        merged = {**self.vars, **(run_vars or {})}
        if merged:
            args += ["--vars", json.dumps(merged)]
        return args

    def parse(self):
        """The parsed project: parsed once per process for the same project files, target, vars
        and environment, then reused by every invocation (dbt renders model SQL when a node runs,
        so a reused manifest sees the database as it is then)."""
        if self.manifest is None:
            key = self._manifest_key()
            if key not in _MANIFESTS:
                from dbt.cli.main import dbtRunner

                result = dbtRunner().invoke(["--quiet", "--log-level", "none", *self._args(["parse"])])
                if not result.success or result.result is None:
                    raise UsageError(f"the project does not parse (dbt parse): {whole(result.exception) or 'see logs/dbt.log'}")
                _MANIFESTS.clear()
                _MANIFESTS[key] = result.result
            self.manifest = _MANIFESTS[key]
        return self.manifest

    def _manifest_key(self) -> tuple:
        """What a parsed manifest depends on: the project's files (path, size, modification time),
        the target, the vars and the environment variables the profile reads."""
        files = [self.project_dir / "dbt_project.yml", self.project_dir / "profiles.yml"]
        for folder in ("models", "macros", "seeds", "tests/dbt"):
            files += sorted((self.project_dir / folder).rglob("*"))
        stats = tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file())
        env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(("SQLSERVER_CDC_", "DBT_"))))
        return (str(self.project_dir), self.target, json.dumps(self.vars, sort_keys=True), env, stats)

    def invoke(self, command: list[str], quiet: bool = False, callbacks: list | None = None,
               run_vars: dict | None = None, flags: list[str] = ()):
        """Runs a dbt command on the parsed project. run_vars are this invocation's vars on top of the
        Dbt object's (a run's plan): dbt reads vars when it renders a node, so they need no re-parse."""
        from dbt.cli.main import dbtRunner

        # quiet: nothing on the console (the caller reports); else dbt's errors, and its line per
        # node when node_log (--verbose); logs/dbt.log has everything either way
        quieting = ["--quiet", "--log-level", "none"] if quiet else [] if self.node_log else ["--quiet"]
        callbacks = list(callbacks or [])
        if self.activity is not None:
            callbacks.append(self.activity.dbt_event)
            self.activity.invoking(" ".join(["dbt", *command[:2 if command[0] == "run-operation" else 1]]))
        runner = dbtRunner(manifest=self.parse(), callbacks=callbacks)
        try:
            result = runner.invoke([*quieting, *flags, *self._args(command, run_vars)])
        finally:
            if self.activity is not None:
                self.activity.invoking(None)
        if result.exception is not None:
            raise InfrastructureError(f"dbt {command[0]} could not run: {whole(result.exception)}")
        return result

    def build(self, select: list[str], full_refresh: bool, exclude: list[str] = (), command: str = "build",
              run_vars: dict | None = None, populate_cache: bool = True) -> list[NodeResult]:
        """Runs `dbt build` (or `dbt test`); returns every node's result (`failures` lists the
        failed ones). populate_cache=False skips dbt's listing of the schema's relations before
        the build (the runner's materializations never look a relation up)."""
        command = [command]
        if select:
            command += ["--select", *select]
        if exclude:
            command += ["--exclude", *exclude]
        if full_refresh:
            command.append("--full-refresh")
        statements: dict[str, list[float]] = {}
        result = self.invoke(command, run_vars=run_vars, flags=[] if populate_cache else ["--no-populate-cache"],
                             callbacks=[lambda event: _count_statements(event, statements)])
        nodes = [NodeResult(name=r.node.name, resource_type=r.node.resource_type, status=str(r.status),
                            depends_on=tuple(n.split(".")[-1] for n in getattr(r.node.depends_on, "nodes", ())),
                            message=_first_error_line(r.message) if str(r.status) in ("error", "fail") else "",
                            seconds=float(r.execution_time or 0), statements=tuple(statements.get(r.node.unique_id, ())))
                 for r in (result.result or [])]
        if not result.success and not failures(nodes):
            nodes.append(NodeResult(f"dbt {command[0]}", "command", "error", message="reported failure (see the log above)"))
        return nodes

    def operation(self, macro: str, args: dict[str, object]) -> dict[str, object]:
        """Runs a macro with `dbt run-operation` (its statements share one connection, so temporary
        views live across them); returns what it reported (see `reported`); raises
        InfrastructureError with the macro's error."""
        errors: list[str] = []
        reports: dict[str, object] = {}

        def on_event(event) -> None:
            if event.info.name in ("RunningOperationCaughtError", "RunningOperationUncaughtError"):
                errors.append(event.data.exc)
            _collect_report(event, reports)

        result = self.invoke(["run-operation", macro, "--args", json.dumps(args)], quiet=True, callbacks=[on_event])
        if not result.success:
            reason = _spark_reason(chr(10).join(errors))
            reading = reports.get("reading", {}).get("file")
            if reading and reading not in reason:
                reason += f" (while reading {reading})"
            raise InfrastructureError(f"dbt run-operation {macro} failed - {reason}")
        return reports

    def query(self, sql: str) -> list[dict[str, object]]:
        """Runs one SELECT (Jinja allowed, macros of the project available) through `dbt show`."""
        result = self.invoke(["show", "--inline", sql, "--limit", "-1"], quiet=True)
        if not result.success:
            raise PipelineFailed(f"query failed: {sql.strip().splitlines()[0]}")
        table = result.result.results[0].agate_table
        return [dict(zip(table.column_names, row)) for row in table.rows]


REPORT_PREFIX = "sqlserver_cdc."


def _collect_report(event, reports: dict[str, object]) -> None:
    """A macro reports to the runner by logging one line `sqlserver_cdc.<name> <json>`
    (begin_run, finish_run); collected as reports[name]."""
    if event.info.name == "JinjaLogInfo":
        message = str(getattr(event.data, "msg", ""))
        name, _, payload = message.partition(" ")
        if name.startswith(REPORT_PREFIX) and payload.startswith("{"):
            reports[name[len(REPORT_PREFIX):]] = json.loads(payload)


def _count_statements(event, statements: dict[str, list[float]]) -> None:
    """Per node, the seconds of each SQL statement dbt sent for it (its compile-time queries
    included): what a test asserts a run stays proportional to, and what the benchmark reports."""
    if event.info.name == "SQLQueryStatus":
        node = getattr(getattr(event.data, "node_info", None), "unique_id", "") or ""
        statements.setdefault(node, []).append(float(event.data.elapsed))


def failures(nodes: list[NodeResult]) -> list[str]:
    """The failed nodes of a build, one line each: "<type> <name>: <status>[ - reason]"."""
    return [f"{n.resource_type} {n.name}: {n.status}" + (f" - {n.message}" if n.message else "")
            for n in nodes if n.status in ("error", "fail")]


def whole(error: object) -> str:
    """A dbt error as one line, whole: what failed, where, and the explanation and remedy the
    project's macros give (dbt's own call trace, `> in macro ...`, left out)."""
    lines = [line.strip() for line in str(error or "").splitlines()]
    return ": ".join(line for line in lines if line and not line.startswith(("> in ", "> called by")))


def _first_error_line(message: str | None) -> str:
    """The line of a dbt error message that says what happened (Spark prefixes its own)."""
    lines = [line.strip() for line in (message or "").splitlines() if line.strip()]
    for line in lines:
        if "validity interval" in line:
            return line
    useful = [line for line in lines if not re.fullmatch(r"(Compilation|Runtime|Database) Error( in .*)?", line)]
    return useful[0][:300] if useful else ""


def _spark_reason(message: str) -> str:
    """What Spark says went wrong, from an error that wraps it (py4j for the embedded session, the
    Thrift response on a cluster): the innermost cause, else the line with Spark's error class."""
    lines = [line.strip() for line in message.splitlines() if line.strip()
             and not line.strip().startswith(("Compilation Error", "Runtime Error", "Database Error", "> in ", "> called by"))]
    causes = [line for line in lines if line.startswith("Caused by:")]
    if causes:
        return re.sub(r"^Caused by: [\w.$]+: ", "", causes[-1])[:300]
    for line in lines:
        found = re.search(r"\[[A-Z][A-Z_]*(\.[A-Z_]+)*\].*", line)
        if found:
            return found.group(0)[:300]
    return lines[0][:300] if lines else "see logs/dbt.log"
