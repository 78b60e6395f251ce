"""The landing folder as the runner sees it: a local folder, or a folder on any file system
Hadoop (so Spark) reads, named by a URI (`hdfs://`, `s3a://`, `abfss://`, `gs://`, ...).

The runner only lists a folder and reads a few bytes of its files (a CSV header, a Parquet
footer's magic, an export manifest); Spark reads the files themselves (macro land_files), at the
path `spark_path` gives. Three kinds of folder, one interface (exists, files, read, spark_path):
- a local path: Python's file calls, before Spark starts (LocalFolder);
- a URI on a session target: Hadoop's FileSystem API in the runner's own SparkSession, the JVM
  Spark already carries with the session's Hadoop settings (HadoopFolder);
- a URI on a target whose Spark runs elsewhere (a Thrift or http server, Spark Connect): the
  runner has no JVM of Spark's, so it lists and probes through fsspec (s3fs, adlfs, gcsfs, or
  fsspec's own WebHDFS client), while the server's Spark reads the same URI (FsspecFolder).
Credentials are never the runner's business: Hadoop takes them from its settings (`spark.hadoop.*`
in the profile, `core-site.xml`), fsspec's file systems from the environment (AWS_*, AZURE_*,
Google's application default credentials), and the runner never prints a URI's user information
(see `display`).
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


# query parameters that carry a credential in the URLs a file system's error may quote: Azure's
# SAS signature, S3's presigned signature and session token, WebHDFS' delegation token, OAuth
SECRET_PARAMETERS = re.compile(r"([?&](?:sig|x-amz-signature|x-amz-security-token|x-amz-credential|delegation|token|"
                               r"access_token|code|key)=)[^&\s\"'<>]+", re.IGNORECASE)


def display(location: str) -> str:
    """A location (or a message quoting one) as the runner may print it: a URI without a secret in
    its user information (`user:key@`; abfss' `container@` stays) and no credential in its
    query parameters (`sig=`, `X-Amz-Signature=`, `delegation=`, ...: shown as ***)."""
    location = re.sub(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s:]*:[^/@\s]*@", r"\1", location)
    return SECRET_PARAMETERS.sub(r"\1***", location)


def open_folder(location: str | Path, spark=None, hadoop: bool = True) -> Folder:
    """The folder a --landing value names: a local path (or `file:` URI) as a LocalFolder, any
    other URI as a HadoopFolder read through `spark` (default: the active session) or, with
    hadoop=False (a target whose Spark is not in the runner's process), as an FsspecFolder."""
    if isinstance(location, (LocalFolder, HadoopFolder, FsspecFolder)):
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
    if not hadoop:
        return FsspecFolder(str(location).rstrip("/"))
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


# Hadoop's scheme -> fsspec's protocol and the package that implements it (`hdfs:` is absent:
# fsspec reads it through libhdfs, which pyspark does not ship; WebHDFS names the same HDFS)
FSSPEC = {"s3a": ("s3", "s3fs"), "s3": ("s3", "s3fs"), "abfss": ("abfs", "adlfs"), "abfs": ("abfs", "adlfs"),
          "gs": ("gs", "gcsfs"), "webhdfs": ("webhdfs", "fsspec")}
# where each file system's listing keeps a file's modification time
MODIFIED = ("modificationTime", "LastModified", "last_modified", "updated", "mtime", "modified")


class FsspecFolder:
    """A folder named by a URI, listed and read in the runner's Python through fsspec, for the
    targets whose Spark is a server (Thrift, http, Spark Connect): the server reads the URI
    itself, with its own Hadoop settings."""

    local = False

    def __init__(self, uri: str):
        self.uri = uri
        scheme = urlsplit(uri).scheme.lower()
        if scheme not in FSSPEC:
            raise UsageError(f"landing folder {self}: a target whose Spark runs elsewhere (a Thrift or http server, "
                             f"Spark Connect) lists a URI through fsspec, which reads {', '.join(sorted(FSSPEC))}:// "
                             f"but not {scheme}:// here" + (" (for HDFS, name the same folder as webhdfs://namenode:"
                             "http-port/...: Spark reads it too)" if scheme == "hdfs" else "")
                             + "; or run on a session target (docs/operations.md \"Landing from object storage\")")
        self._protocol, self._package = FSSPEC[scheme]
        self._fs = None

    def __str__(self) -> str:
        return display(self.uri)

    def _fsspec(self):
        """(the file system, the folder's path in it), on first use."""
        if self._fs is None:
            try:
                from fsspec.core import url_to_fs

                self._fs, self._root = url_to_fs(self._protocol + self.uri[self.uri.index(":"):])
            except ImportError as exc:
                raise UsageError(f"landing folder {self}: listing it needs the Python package {self._package} "
                                 f"(pip install '{self._package}'; fsspec: {exc})") from None
            except Exception as exc:  # noqa: BLE001 - a file system's own configuration errors
                raise InfrastructureError(f"landing folder {self}: fsspec cannot open it: {_message(exc)}") from None
            self._root = self._root.rstrip("/")
        return self._fs, self._root

    def exists(self) -> bool:
        fs, root = self._fsspec()
        try:
            return fs.info(root).get("type") == "directory"  # not isdir: it reads an unreachable store as no folder
        except FileNotFoundError:
            return False
        except Exception as exc:  # noqa: BLE001
            raise InfrastructureError(f"landing folder {self}: cannot list it: {_message(exc)}") from None

    def files(self, under: str) -> list[Listed]:
        fs, root = self._fsspec()
        base = f"{root}/{under}"
        try:
            found = fs.find(base, detail=True, **_raising(fs))
        except FileNotFoundError:
            return []
        except Exception as exc:  # noqa: BLE001
            raise InfrastructureError(f"landing folder {self}: cannot list {under}/: {_message(exc)}") from None
        prefix = fs._strip_protocol(root).rstrip("/") + "/"
        listed = []
        for name, info in found.items():
            name = fs._strip_protocol(name)
            if info.get("type", "file") == "file" and name.startswith(prefix):
                listed.append(Listed(name[len(prefix):], int(info.get("size") or 0), _modified_ns(info)))
        return sorted(listed, key=lambda f: f.relative)

    def read(self, relative: str, offset: int = 0, length: int = -1) -> bytes:
        fs, root = self._fsspec()
        try:
            with fs.open(f"{root}/{relative}", "rb") as f:
                f.seek(offset)
                return f.read(length)
        except Exception as exc:  # noqa: BLE001
            raise InfrastructureError(f"landing folder {self}: cannot read {relative}: {_message(exc)}") from None

    def spark_path(self, relative: str) -> str:
        return f"{self.uri}/{relative}"


def _raising(fs) -> dict:
    """The argument that makes `fs.find` raise on a folder it cannot list: fsspec's own find (a
    walk, e.g. WebHDFS's) reads an unreachable store as an empty folder unless given
    on_error='raise'; an object store's own find (s3fs, adlfs, gcsfs list by prefix) raises
    already and refuses that argument."""
    from fsspec.asyn import AsyncFileSystem
    from fsspec.spec import AbstractFileSystem

    walks = type(fs)._find is AsyncFileSystem._find if isinstance(fs, AsyncFileSystem) else \
        type(fs).find is AbstractFileSystem.find
    return {"on_error": "raise"} if walks else {}


def _modified_ns(info: dict) -> int:
    """A listed file's modification time in ns, from whichever field its file system gives
    (WebHDFS: milliseconds; object stores: a datetime or ISO text)."""
    from datetime import datetime

    for key in MODIFIED:
        value = info.get(key)
        if isinstance(value, str):
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if isinstance(value, datetime):
            return int(value.timestamp() * 1_000_000) * 1000
        if isinstance(value, (int, float)) and value:
            return int(value) * 1_000_000 if key == "modificationTime" else int(value * 1_000_000_000)
    raise InfrastructureError(f"the file system gives no modification time for {display(str(info.get('name')))} "
                              f"(fields: {', '.join(sorted(info))})")


def _message(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return display(text[0] if text else type(exc).__name__)


Folder = LocalFolder | HadoopFolder | FsspecFolder


def _java_message(exc: Exception) -> str:
    """The first line of a py4j error's Java exception, without the URI's user information."""
    text = str(getattr(exc, "java_exception", None) or exc).strip().splitlines()
    return display(text[0] if text else type(exc).__name__)
