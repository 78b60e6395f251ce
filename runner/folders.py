"""The landing folder as the runner sees it: a local folder, or a folder on any file system
Hadoop (so Spark) reads, named by a URI (`hdfs://`, `s3a://`, `abfss://`, `gs://`, ...).

The runner only lists a folder and reads a few bytes of its files (a CSV header, a Parquet
footer's magic, an export manifest); Spark reads the files themselves (macro land_files), at the
path `spark_path` gives. A local folder is read with Python's file calls, before Spark starts; a
URI through Hadoop's FileSystem API in the runner's own SparkSession (the JVM Spark already
carries, with the session's Hadoop settings), so a URI needs a session target and a started
session. Credentials are never the runner's business: Hadoop takes them from its settings
(`spark.hadoop.*` in the profile, `core-site.xml`) or the environment, and the runner never
prints a URI's user information (see `display`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from py4j.protocol import Py4JJavaError

from runner.errors import InfrastructureError, UsageError

URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass(frozen=True)
class Listed:
    """A file under the folder: its path relative to the folder (`/`-separated), size in bytes,
    modification time in nanoseconds (Hadoop file systems keep milliseconds; object stores give
    the time the object was written, which changes when it is replaced)."""
    relative: str
    size: int
    modified_ns: int


def is_uri(location: str | Path) -> bool:
    """Whether a --landing value names a folder by URI rather than a local path (a Windows drive
    letter is not a scheme)."""
    return isinstance(location, str) and bool(URI.match(location)) and not re.match(r"^[A-Za-z]:[\\/]", location)


def display(location: str) -> str:
    """A location as the runner may print it: a URI without a secret in its user information
    (`user:key@`; abfss' `container@` stays)."""
    return re.sub(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s:]*:[^/@\s]*@", r"\1", location)


def open_folder(location: str | Path, spark=None) -> LocalFolder | HadoopFolder:
    """The folder a --landing value names: a local path (or `file:` URI) as a LocalFolder, any
    other URI as a HadoopFolder read through `spark` (default: the active session)."""
    if isinstance(location, (LocalFolder, HadoopFolder)):
        return location
    if not is_uri(location):
        return LocalFolder(Path(location).resolve())
    parts = urlsplit(str(location))
    if parts.scheme.lower() == "file":
        return LocalFolder(Path(unquote(parts.path)).resolve())
    if "@" in parts.netloc and ":" in parts.netloc.split("@")[0]:
        raise UsageError(f"landing folder {display(str(location))}: its URI holds a secret (user:secret@), which "
                         "would reach the run's logs; give the file system its credentials in Hadoop's settings "
                         "or the environment instead (docs/operations.md \"Landing from object storage\")")
    return HadoopFolder(str(location).rstrip("/"), spark)


class LocalFolder:
    """A folder of this machine's file system (Spark reads it at the same absolute path)."""

    local = True

    def __init__(self, root: Path):
        self.root = root

    def __str__(self) -> str:
        return str(self.root)

    def exists(self) -> bool:
        return self.root.is_dir()

    def files(self, under: str) -> list[Listed]:
        """Every file below the sub-folder `under`, in name order ([] when it does not exist)."""
        base = self.root / under
        found = []
        for path in sorted(base.rglob("*")) if base.is_dir() else []:
            if path.is_file():
                stat = path.stat()
                found.append(Listed(path.relative_to(self.root).as_posix(), stat.st_size, stat.st_mtime_ns))
        return found

    def read(self, relative: str, offset: int = 0, length: int = -1) -> bytes:
        """`length` bytes (all with -1) of a file from `offset`."""
        with (self.root / relative).open("rb") as f:
            f.seek(offset)
            return f.read(length)

    def spark_path(self, relative: str) -> str:
        return str((self.root / relative).resolve())


class HadoopFolder:
    """A folder named by a URI, listed and read through Hadoop's FileSystem API in the JVM of a
    SparkSession (the runner's own: a session target)."""

    local = False

    def __init__(self, uri: str, spark=None):
        self.uri, self._spark, self._fs = uri, spark, None

    def __str__(self) -> str:
        return display(self.uri)

    def _hadoop(self):
        """(the JVM, the folder's FileSystem, its qualified root), on first use."""
        if self._fs is None:
            spark = self._spark
            if spark is None:
                from pyspark.sql import SparkSession

                spark = SparkSession.getActiveSession()
            jvm = getattr(spark, "_jvm", None) if spark is not None else None
            if jvm is None:
                raise UsageError(f"landing folder {self}: a URI is read through Hadoop's file systems in the runner's "
                                 "own SparkSession, so it needs a session target (method: session, local or with a "
                                 "cluster's master) and not a Spark Connect session; or mount the folder and pass its "
                                 "local path (docs/operations.md \"Landing from object storage\")")
            root = jvm.org.apache.hadoop.fs.Path(self.uri)
            try:
                fs = root.getFileSystem(spark._jsc.hadoopConfiguration())
            except Py4JJavaError as exc:  # no FileSystem for the scheme (a connector's jar is missing), bad authority
                raise InfrastructureError(f"landing folder {self}: Hadoop cannot open it: "
                                          f"{_java_message(exc)}") from None
            self._jvm, self._fs, self._root = jvm, fs, fs.makeQualified(root).toString().rstrip("/")
        return self._jvm, self._fs, self._root

    def _path(self, relative: str = ""):
        jvm, _, root = self._hadoop()
        return jvm.org.apache.hadoop.fs.Path(f"{root}/{relative}" if relative else root)

    def exists(self) -> bool:
        _, fs, _ = self._hadoop()
        try:
            return bool(fs.exists(self._path()) and fs.getFileStatus(self._path()).isDirectory())
        except Py4JJavaError as exc:
            raise InfrastructureError(f"landing folder {self}: cannot list it: {_java_message(exc)}") from None

    def files(self, under: str) -> list[Listed]:
        _, fs, root = self._hadoop()
        found = []
        try:
            if not fs.exists(self._path(under)):
                return []
            listing = fs.listFiles(self._path(under), True)
            while listing.hasNext():
                status = listing.next()
                path = status.getPath().toString()
                if path.startswith(root + "/"):
                    found.append(Listed(path[len(root) + 1:], int(status.getLen()),
                                        int(status.getModificationTime()) * 1_000_000))
        except Py4JJavaError as exc:
            raise InfrastructureError(f"landing folder {self}: cannot list {under}/: {_java_message(exc)}") from None
        return sorted(found, key=lambda f: f.relative)

    def read(self, relative: str, offset: int = 0, length: int = -1) -> bytes:
        _, fs, _ = self._hadoop()
        try:
            stream = fs.open(self._path(relative))
            try:
                if offset:
                    stream.seek(offset)
                return bytes(stream.readAllBytes() if length < 0 else stream.readNBytes(length))
            finally:
                stream.close()
        except Py4JJavaError as exc:
            raise InfrastructureError(f"landing folder {self}: cannot read {relative}: {_java_message(exc)}") from None

    def spark_path(self, relative: str) -> str:
        return f"{self._hadoop()[2]}/{relative}"


def _java_message(exc: Exception) -> str:
    """The first line of a py4j error's Java exception, without the URI's user information."""
    text = str(getattr(exc, "java_exception", None) or exc).strip().splitlines()
    return display(text[0] if text else type(exc).__name__)
