"""Delta Lake's jars: resolved once from Maven Central at set-up, then loaded from the project's
git-ignored jar folder, so a run after set-up needs no network.

The coordinates are the ones Delta's own Python package asks Spark for
(`delta.configure_spark_with_delta_pip`: `io.delta:delta-spark_<spark major.minor>_2.13:<version>`);
Spark's own resolver (Ivy, `spark-submit --packages`) fetches them and their dependencies into
`<jar folder>/ivy` during `python -m runner.jars` (run by `make` at install, or by the first
session that finds the folder empty), and the jars are copied flat into the jar folder. Every session, the profile's included, then names only
`<jar folder>/*.jar` (`spark.jars`), never a remote package.

`python -m runner.jars` prints what it fetched and its size; it is idempotent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from runner.errors import InfrastructureError

MARKER = ".resolved"


RUNNER_HOME = Path(__file__).resolve().parent.parent  # the checkout the runner is installed from


def jars_dir() -> Path:
    """The jar folder: SQLSERVER_CDC_JARS_DIR, else .jars/ in the runner's checkout (whatever
    dbt project a run builds)."""
    configured = Path(os.environ.get("SQLSERVER_CDC_JARS_DIR", ".jars"))
    return configured if configured.is_absolute() else RUNNER_HOME / configured


def delta_packages() -> str:
    """The Maven coordinates Delta's Python package configures for the installed pyspark."""
    from delta import pip_utils
    from pyspark.sql import SparkSession

    builder = pip_utils.configure_spark_with_delta_pip(SparkSession.Builder())  # starts nothing
    return builder._options["spark.jars.packages"]


def resolved() -> bool:
    folder = jars_dir()
    marker = folder / MARKER
    return marker.exists() and marker.read_text().strip() == delta_packages() and any(folder.glob("*.jar"))


def ensure(quiet: bool = False) -> Path:
    """Fetches Delta's jars into the jar folder unless they are there; returns the folder."""
    folder = jars_dir()
    if resolved():
        return folder
    packages = delta_packages()
    folder.mkdir(parents=True, exist_ok=True)
    ivy = folder / "ivy"
    from pyspark.find_spark_home import _find_spark_home

    submit = Path(_find_spark_home()) / "bin" / "spark-submit"
    with tempfile.TemporaryDirectory() as tmp:
        noop = Path(tmp) / "noop.py"
        noop.write_text("")
        command = [str(submit), "--master", "local[1]", "--packages", packages,
                   "--conf", f"spark.jars.ivy={ivy}", "--conf", "spark.ui.enabled=false", str(noop)]
        env = {**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
               "PYSPARK_PYTHON": sys.executable}
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    fetched = sorted((ivy / "jars").glob("*.jar")) if (ivy / "jars").is_dir() else []
    if done.returncode != 0 or not fetched:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise InfrastructureError(
            f"could not fetch Delta Lake's jars ({packages}) from Maven Central: {tail or 'no jar resolved'}")
    for old in folder.glob("*.jar"):
        old.unlink()
    for jar in fetched:
        shutil.copy2(jar, folder / jar.name)
    shutil.rmtree(ivy, ignore_errors=True)  # the flat copy is what sessions load
    (folder / MARKER).write_text(packages + "\n")
    if not quiet:
        size = sum((folder / j.name).stat().st_size for j in fetched)
        print(f"fetched {packages} and its dependencies from Maven Central: {len(fetched)} jars, "
              f"{size / 2**20:.1f} MiB, in {folder}")
    return folder


def jar_list(only: str = "", separator: str = ",") -> str:
    """spark.jars: every jar of the jar folder (fetched first if missing), comma-separated; with
    `only`, the jars whose file name starts with it (e.g. Delta's own, "io.delta_")."""
    return separator.join(str(j) for j in sorted(ensure().glob(f"{only}*.jar")))


def main() -> int:
    try:
        ensure()
    except InfrastructureError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
