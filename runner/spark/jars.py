"""The jars the sessions load, Delta Lake's, Spark's Kafka source's and Hadoop's S3A connector's
(`s3a://`, with the AWS SDK v2 modules it uses), Apache Kafka's broker
(for the tests and `make kafka-up`, in `<jar folder>/kafka-broker`) and Apache Hadoop's HDFS
mini-cluster (for the tests and `make hdfs-up`, in `<jar folder>/hdfs`): resolved once from Maven
Central at set-up (the broker's and the mini-cluster's only by the tests' set-up, `--tests`),
then loaded from the project's git-ignored jar folder, so a run after set-up needs no network.

Delta's coordinates are the ones Delta's own Python package asks Spark for
(`delta.configure_spark_with_delta_pip`: `io.delta:delta-spark_<spark major.minor>_2.13:<version>`);
Spark's own resolver (Ivy, `spark-submit --packages`) fetches them and their dependencies during
`python -m runner.spark.jars` (run by `make` at install, or by the first session that finds the
folder empty) into Ivy's cache, a user-level download cache like pip's and Maven's
(`$SQLSERVER_CDC_IVY_HOME`, else `$XDG_CACHE_HOME/sqlserver_cdc/ivy`, else
`~/.cache/sqlserver_cdc/ivy`: a second checkout on the machine resolves from it without
downloading), and the jars that resolution names are copied flat into the jar folder. The
runner's sessions then name them one by one (`spark.jars`, which also ships them to a cluster's
executors), never a remote package. Delta's own jars are also linked into `<jar folder>/driver/`,
the folder the profile puts on a plain dbt session's classpath (`spark.driver.extraClassPath:
<jar folder>/driver/*`): `spark.jars` takes no glob (Spark prints an ERROR and a stack trace on
each start), and the whole folder on the classpath would put its older Jackson before Spark's.

The project's own jar, a log store for Delta on the local file system (build_log_store), is
compiled from its source into the jar folder at the same time, and named and linked with Delta's.

`python -m runner.spark.jars` prints what it fetched and its size; it is idempotent.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from urllib.parse import urlparse

from runner.errors import InfrastructureError

MARKER = ".resolved"


RUNNER_HOME = Path(__file__).resolve().parents[2]  # the checkout the runner is installed from


def ivy_home() -> Path:
    """Ivy's home for the resolutions (its download cache): SQLSERVER_CDC_IVY_HOME, else
    sqlserver_cdc/ivy in the user's cache folder (XDG_CACHE_HOME, else ~/.cache)."""
    configured = os.environ.get("SQLSERVER_CDC_IVY_HOME")
    if configured:
        return Path(configured).expanduser().resolve()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "sqlserver_cdc" / "ivy"


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


def kafka_package() -> str:
    """Spark's Kafka source for the installed pyspark: its own version, or for a line whose
    newer patch releases Maven Central does not serve whole (their token provider is missing),
    the newest of the line that resolves (the source's API is stable within a line)."""
    import pyspark

    version = pyspark.__version__
    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{KAFKA_SOURCE_FOR_LINE.get(version.rsplit('.', 1)[0], version)}"


KAFKA_SOURCE_FOR_LINE = {"4.1": "4.1.1"}
# Apache Kafka's broker (KRaft), for the tests and `make kafka-up` only: its jars live in their
# own folder and run in their own JVM, beside Scala's library from pyspark (Spark's resolver
# leaves Scala out)
BROKER_PACKAGE = "org.apache.kafka:kafka_2.13:4.1.1"


def hadoop_version() -> str:
    """The Hadoop release pyspark carries (its hadoop-client-api jar)."""
    from pyspark.find_spark_home import _find_spark_home

    found = sorted((Path(_find_spark_home()) / "jars").glob("hadoop-client-api-*.jar"))
    if not found:
        raise InfrastructureError("pyspark's jars hold no hadoop-client-api jar: is pyspark installed whole?")
    return found[-1].name.removeprefix("hadoop-client-api-").removesuffix(".jar")


def hdfs_packages() -> str:
    """Apache Hadoop's HDFS mini-cluster (a NameNode and DataNodes in one JVM, for the tests and
    `make hdfs-up` only) at pyspark's Hadoop release, with JUnit, which its launcher loads, and
    the javax JAXB API, which its WebHDFS server needs and Java 11+ no longer carries."""
    return (f"org.apache.hadoop:hadoop-client-minicluster:{hadoop_version()},junit:junit:4.13.2,"
            "javax.xml.bind:jaxb-api:2.3.1")


# AWS SDK v2's modules for hadoop-aws, one by one (the SDK's `bundle` that hadoop-aws depends on
# is 612 MiB): the S3 client and its transfer manager, STS (assumed roles, web identity tokens)
# and the Apache HTTP client, at the SDK's BOM release served here; Ivy adds what they need
AWS_SDK = "2.57.8"
AWS_SDK_MODULES = ("s3", "s3-transfer-manager", "sts", "apache-client")
# left out of the resolution: the bundle, and what Spark carries already at its own (newer)
# release (Netty, Apache HttpClient 4, Commons Codec and Logging, SLF4J)
EXCLUDES = ("software.amazon.awssdk:bundle", "commons-codec:commons-codec", "commons-logging:commons-logging",
            "org.apache.httpcomponents:httpclient", "org.apache.httpcomponents:httpcore", "org.slf4j:slf4j-api",
            *(f"io.netty:netty-{m}" for m in ("buffer", "codec", "codec-http", "codec-http2", "common", "handler",
                                              "resolver", "transport", "transport-classes-epoll",
                                              "transport-native-unix-common")))


def s3a_packages() -> str:
    """Hadoop's S3A connector (`s3a://`) at pyspark's Hadoop release, with AWS_SDK_MODULES."""
    return ",".join([f"org.apache.hadoop:hadoop-aws:{hadoop_version()}",
                     *(f"software.amazon.awssdk:{m}:{AWS_SDK}" for m in AWS_SDK_MODULES)])


def spark_packages() -> str:
    """Every package a session loads: Delta Lake, Spark's Kafka source and Hadoop's S3A connector."""
    return f"{delta_packages()},{kafka_package()},{s3a_packages()}"


def broker_dir() -> Path:
    return jars_dir() / "kafka-broker"


def resolved(folder: Path | None = None, packages: str | None = None) -> bool:
    folder = folder or jars_dir()
    marker = folder / MARKER
    wanted = packages or spark_packages()
    return marker.exists() and marker.read_text().strip() == wanted and any(folder.glob("*.jar"))


def ensure(quiet: bool = False) -> Path:
    """Fetches the sessions' jars (Delta Lake, Kafka source) into the jar folder unless they are
    there, builds the project's log store beside them (build_log_store), and links Delta's and
    the log store's into driver_dir(); returns the folder."""
    folder = _ensure(jars_dir(), spark_packages(), quiet, EXCLUDES)
    build_log_store(folder)
    _link_driver_jars(folder)
    return folder


# Delta's log store for the local file system that reads a _delta_log's names before any entry's
# status (runner/spark/java/, docs/performance.md "Maintenance"): profiles.yml names it for the
# `file` scheme (spark.delta.logStore.file.impl). Built at set-up from its source with the Eclipse
# compiler for Java, which runs on a JRE (Spark needs no JDK, and neither does set-up), resolved
# like the sessions' jars (Ivy, into <jar folder>/compiler); the jar goes into the jar folder, so
# that spark.jars and the driver folder take it with Delta's.
LOG_STORE_CLASS = "sqlserver_cdc.delta.NamesFirstLocalLogStore"
LOG_STORE_SOURCE = RUNNER_HOME / "runner" / "spark" / "java" / Path(*LOG_STORE_CLASS.split(".")).with_suffix(".java")
LOG_STORE_JAR = "sqlserver_cdc-logstore-"  # + the source's digest: an edited source builds a new jar
COMPILER_PACKAGE = "org.eclipse.jdt:ecj:3.46.100"


def java_command() -> str | None:
    """The `java` on PATH, else $JAVA_HOME/bin/java; None when there is neither."""
    found = shutil.which("java", path=os.environ.get("PATH"))
    if found is None and os.environ.get("JAVA_HOME"):
        candidate = Path(os.environ["JAVA_HOME"]) / "bin" / "java"
        found = str(candidate) if candidate.exists() else None
    return found


def build_log_store(folder: Path) -> Path:
    """The log store's jar in `folder`, compiled (against the folder's Delta storage jar and
    pyspark's Hadoop API) unless a jar of the current source is there; older builds are removed.
    The jar's entries carry a fixed time, so a build is the same bytes on every machine."""
    digest = hashlib.sha256(LOG_STORE_SOURCE.read_bytes()).hexdigest()[:12]
    jar = folder / f"{LOG_STORE_JAR}{digest}.jar"
    if not jar.is_file():
        java = java_command()
        storage = sorted(folder.glob("io.delta_delta-storage-*.jar"))
        if java is None or not storage:
            raise InfrastructureError(f"cannot build {LOG_STORE_CLASS}: "
                                      + ("java not found (Spark needs Java 17)" if java is None
                                         else f"no Delta storage jar in {folder}"))
        from pyspark.find_spark_home import _find_spark_home

        compiler = max(_ensure(jars_dir() / "compiler", COMPILER_PACKAGE, quiet=True).glob("*.jar"))
        classpath = [str(storage[-1]), str(Path(_find_spark_home()) / "jars" / f"hadoop-client-api-{hadoop_version()}.jar")]
        with tempfile.TemporaryDirectory() as tmp:
            classes = Path(tmp) / "classes"
            done = subprocess.run([java, "-jar", str(compiler), "--release", "17", "-nowarn", "-proc:none",
                                   "-encoding", "UTF-8", "-d", str(classes), "-cp", os.pathsep.join(classpath),
                                   str(LOG_STORE_SOURCE)], capture_output=True, text=True, check=False)
            built = sorted(classes.rglob("*.class"))
            if done.returncode != 0 or not built:
                first = "\n".join((done.stderr or done.stdout).strip().splitlines()[:6])  # the first error, whole
                raise InfrastructureError(f"could not compile {LOG_STORE_SOURCE}: {first or 'no class written'}")
            staged = jar.with_suffix(".partial")  # renamed whole: a build killed halfway leaves no jar
            with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as archive:
                archive.writestr(zipfile.ZipInfo("META-INF/MANIFEST.MF"), "Manifest-Version: 1.0\r\n\r\n")
                for path in built:
                    archive.writestr(zipfile.ZipInfo(path.relative_to(classes).as_posix()), path.read_bytes(),
                                     zipfile.ZIP_DEFLATED)
            os.replace(staged, jar)
    for old in folder.glob(f"{LOG_STORE_JAR}*.jar"):
        if old != jar:
            old.unlink()
    return jar


DRIVER = "driver"


def driver_dir() -> Path:
    """The folder of the jars a plain dbt session's driver loads (the profile's
    spark.driver.extraClassPath): Delta Lake's own and the project's log store."""
    return jars_dir() / DRIVER


def _link_driver_jars(folder: Path) -> None:
    """Makes <folder>/driver hold exactly Delta's jars and the log store's of the folder (hard
    links, copies where the file system has none)."""
    driver = folder / DRIVER
    wanted = {j.name: j for pattern in ("io.delta_*.jar", f"{LOG_STORE_JAR}*.jar") for j in folder.glob(pattern)}
    present = {j.name for j in driver.glob("*.jar")} if driver.is_dir() else set()
    if present == set(wanted):
        return
    driver.mkdir(exist_ok=True)
    for name in present - set(wanted):
        (driver / name).unlink()
    for name in set(wanted) - present:
        try:
            os.link(wanted[name], driver / name)
        except OSError:
            shutil.copy2(wanted[name], driver / name)


def ensure_broker(quiet: bool = False) -> Path:
    """Fetches Apache Kafka's broker jars into their folder unless they are there."""
    return _ensure(broker_dir(), BROKER_PACKAGE, quiet)


def hdfs_dir() -> Path:
    return jars_dir() / "hdfs"


def ensure_hdfs(quiet: bool = False) -> Path:
    """Fetches the HDFS mini-cluster's jars into their folder unless they are there."""
    return _ensure(hdfs_dir(), hdfs_packages(), quiet)


def _ensure(folder: Path, packages: str, quiet: bool, excludes: tuple[str, ...] = ()) -> Path:
    if resolved(folder, packages):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    from pyspark.find_spark_home import _find_spark_home

    submit = Path(_find_spark_home()) / "bin" / "spark-submit"
    with tempfile.TemporaryDirectory() as tmp:
        # the application prints the jars spark-submit resolved for it (Ivy's retrieve folder
        # also holds every earlier resolution's)
        names = Path(tmp) / "jars.txt"
        noop = Path(tmp) / "noop.py"
        noop.write_text("import sys\nfrom pyspark import SparkContext\nSparkContext._ensure_initialized()\n"
                        "open(sys.argv[1], 'w').write(SparkContext._jvm.System.getProperty('spark.jars') or '')\n")
        command = [str(submit), "--master", "local[1]", "--packages", packages,
                   *(["--conf", f"spark.jars.excludes={','.join(excludes)}"] if excludes else []),
                   "--conf", f"spark.jars.ivy={ivy_home()}", "--conf", "spark.ui.enabled=false", str(noop), str(names)]
        env = {**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
               "PYSPARK_PYTHON": sys.executable}
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        listed = names.read_text().split(",") if names.exists() else []
    fetched = sorted((Path(urlparse(j).path) for j in listed if j.endswith(".jar")), key=lambda j: j.name)
    if done.returncode != 0 or not fetched or not all(j.is_file() for j in fetched):
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise InfrastructureError(
            f"could not fetch {packages} from Maven Central: {tail or 'no jar resolved'}")
    for old in folder.glob("*.jar"):
        old.unlink()
    for jar in fetched:  # the flat copy is what sessions load
        shutil.copy2(jar, folder / jar.name)
    (folder / MARKER).write_text(packages + "\n")
    if not quiet:
        size = sum((folder / j.name).stat().st_size for j in fetched)
        print(f"resolved {packages} and its dependencies (Maven Central, downloads cached in {ivy_home()}): "
              f"{len(fetched)} jars, {size / 2**20:.1f} MiB, in {folder}")
    return folder


def jar_list(only: str = "", separator: str = ",") -> str:
    """spark.jars: every jar of the jar folder (fetched first if missing), comma-separated; with
    `only`, the jars whose file name starts with it (e.g. Delta's own, "io.delta_")."""
    return separator.join(str(j) for j in sorted(ensure().glob(f"{only}*.jar")))


def main(argv: list[str] | None = None) -> int:
    """`python -m runner.spark.jars`: the sessions' jars (what `make demo` and every run need);
    with `--tests`, also the Kafka broker's and the HDFS mini-cluster's, which only the tests and
    `make kafka-up` / `make hdfs-up` use (`make test` and `make test-fast` ask for them)."""
    argv = sys.argv[1:] if argv is None else argv
    unknown = [a for a in argv if a != "--tests"]
    if unknown:
        print(f"usage: python -m runner.spark.jars [--tests] (not {' '.join(unknown)})", file=sys.stderr)
        return 2
    try:
        ensure()
        if "--tests" in argv:
            ensure_broker()
            ensure_hdfs()
    except InfrastructureError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
