"""Creates the one SparkSession of a run, with the profile's settings, before dbt starts:
dbt-spark's session method then reuses it (SparkSession.builder.getOrCreate)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import threading
import warnings
from pathlib import Path

from runner.errors import InfrastructureError
from runner.run.lock import state_dir
from runner.spark import jars
from runner.spark.profile import Target

LOG_CONFIGURATION = jars.RUNNER_HOME / "conf" / "log4j2.properties"


def check_java() -> None:
    java = jars.java_command()
    if java is None:
        raise InfrastructureError(
            "java not found: Spark needs Java 17 (install e.g. openjdk-17-jre-headless and retry)"
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    if '"1.8' in out or '"11.' in out:
        raise InfrastructureError(f"Spark 4 needs Java 17 or newer; found: {out.splitlines()[0]}")


def create_session(target: Target, project_dir: Path):
    """Returns a SparkSession configured from the target (session targets only): the embedded
    Spark (or the driver of a cluster application), or a Spark Connect session to the server the
    target's `spark.remote` names."""
    if target.method != "session":
        raise InfrastructureError(
            f"target '{target.name}' uses method '{target.method}': it runs on a Spark server, "
            "not in a local SparkSession"
        )
    if target.remote:
        return _connect(target)
    check_java()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("sqlserver_cdc").enableHiveSupport()
    for key, value in _runner_conf(target.spark_conf).items():
        builder = builder.config(key, value)
    # Delta's jars from the project's jar folder (fetched at set-up; the first session fetches
    # them if set-up did not), named one by one: Spark's classpath expands a glob, its jar
    # server (which ships jars to executors) does not
    builder = builder.config("spark.jars", jars.jar_list())
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    state_dir(project_dir).mkdir(parents=True, exist_ok=True)
    cwd = Path.cwd()
    try:
        os.chdir(project_dir)  # relative state paths in the profile are relative to the project
        launch_jvm(builder)
        spark = builder.getOrCreate()
    except Exception as exc:  # Spark start-up fails in many ways; all are infrastructure
        raise InfrastructureError(f"Spark did not start: {exc}".splitlines()[0]) from exc
    finally:
        os.chdir(cwd)
    spark.sparkContext.setLogLevel("ERROR")
    # PySpark 4 logs every failed statement with its JVM stack trace as JSON; dbt already
    # reports the error of a failing model in one readable block.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    return spark


# What Java prints on every start of a JVM that Spark's launcher starts: the launcher adds the
# incubating vector module (for MLlib's BLAS) to every command (spark-launcher's JavaModuleOptions),
# and the JVM has no option that keeps this notice quiet. It says nothing about the run.
JVM_NOTICES = frozenset({"WARNING: Using incubator modules: jdk.incubator.vector"})
# What Delta prints on the JVM's standard output (Scala's println, not its log): VACUUM's count of
# the files it deleted, once per VACUUM of a maintenance pass, which reports the same count itself
# (runner/run/maintain.py describe). Every other line of the JVM's standard output passes on.
JVM_CONSOLE_NOTICES = (re.compile(r"Deleted \d+ files and directories in a total of \d+ directories\."),)


def launch_jvm(builder) -> None:
    """Starts the JVM the builder's session will use, as builder.getOrCreate would (Spark's launcher
    with the builder's settings), unless one runs, with its standard error passed on line by line
    but JVM_NOTICES: everything else the JVM prints (Spark's log, a failed start) still reaches
    this process's standard error."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf()  # no JVM yet: a plain dict of the builder's settings, as getOrCreate builds it
    for key, value in builder._options.items():
        conf.set(key, value)
    err_read, err_write = os.pipe()
    out_read, out_write = os.pipe()
    threading.Thread(target=pass_on, args=(err_read, 2), name="jvm-stderr", daemon=True).start()
    threading.Thread(target=pass_on, args=(out_read, 1, frozenset(), JVM_CONSOLE_NOTICES), name="jvm-stdout",
                     daemon=True).start()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": err_write, "stdout": out_write})
    finally:
        os.close(err_write)  # the JVM holds its own copies; the readers end when the JVM does
        os.close(out_write)
    SparkContext._ensure_initialized(gateway=gateway)


def pass_on(read: int, out: int = 2, dropped: frozenset[str] = JVM_NOTICES, patterns: tuple = ()) -> None:
    """Copies the lines of the pipe `read` to the file descriptor `out` but those in `dropped` and
    those `patterns` match whole, until the pipe's writers close it."""
    with os.fdopen(read, "rb") as lines:
        for line in lines:
            text = line.rstrip(b"\r\n").decode("utf-8", "replace")
            if text in dropped or any(p.fullmatch(text) for p in patterns):
                continue
            while line:
                line = line[os.write(out, line):]


def _runner_conf(conf: dict[str, str]) -> dict[str, str]:
    """The profile's settings for the runner's own session, less the profile's jar folder for plain
    dbt (`<jar folder>/driver/*` on the driver's classpath): the runner names every jar in
    spark.jars, which puts them on the classpath already, and with both a run of the benchmark's
    many-tables phases took about a tenth longer. Other classpath entries stay."""
    classpath = conf.get("spark.driver.extraClassPath")
    if classpath is None:
        return conf
    kept = [entry for entry in classpath.split(os.pathsep) if not entry.rstrip("/*").endswith(f"/{jars.DRIVER}")]
    trimmed = {k: v for k, v in conf.items() if k != "spark.driver.extraClassPath"}
    return {**trimmed, "spark.driver.extraClassPath": os.pathsep.join(kept)} if kept else trimmed


def _connect(target: Target):
    """A Spark Connect session to target.remote with the target's session settings (the server
    owns its static settings, Delta's extension and catalog among them). dbt-spark's session
    method then reuses it: its builder asks for Hive support, a static setting a Connect session
    cannot change, and pyspark warns about it on every connection; those warnings are silenced."""
    warnings.filterwarnings("ignore", message=".*CANNOT_MODIFY_STATIC_CONFIG.*")
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession  # noqa: F401 (needs pyspark[connect])
    except ImportError as exc:
        raise InfrastructureError(f"target '{target.name}' connects to Spark Connect ({target.remote}), which needs "
                                  f"pyspark's connect extra: pip install -e '.[connect]' ({exc})") from None
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.remote(target.remote)
    for key, value in target.spark_conf.items():
        if key != "spark.remote":
            builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
        spark.sql("select 1").collect()
    except Exception as exc:  # grpc and Spark fail in many ways; all are infrastructure
        raise InfrastructureError(f"Spark Connect at {target.remote} did not answer: {exc}".splitlines()[0]) from exc
    return spark


def create_file_writer_session():
    """A plain local SparkSession (no metastore, no UI) for writing landing files only, e.g. the
    demo data when the pipeline runs on a cluster."""
    check_java()
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        builder = (SparkSession.builder.appName("sqlserver_cdc_files").master("local[1]")
                   .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.session.timeZone", "UTC")
                   # Spark's log as the embedded session's: errors only (its default prints how to
                   # change the log level on every start)
                   .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG_CONFIGURATION}"))
        launch_jvm(builder)
        spark = builder.getOrCreate()
    except Exception as exc:  # Spark start-up fails in many ways; all are infrastructure
        raise InfrastructureError(f"Spark did not start: {exc}".splitlines()[0]) from exc
    spark.sparkContext.setLogLevel("ERROR")
    return spark
