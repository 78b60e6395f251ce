"""A landing folder on a remote file system (docs/operations.md "Landing from object storage"):
Apache Hadoop's HDFS mini-cluster (cdc_tooling/hdfs.py) and an S3 API server (moto's) on
127.0.0.1, read through Hadoop's FileSystem API (HDFS, S3A) and through fsspec (WebHDFS, s3fs)
like any object store. The runner's view of a remote folder (what lands, waits or is refused, and
why) equals its view of the same files in a local folder; batches exported to S3 land through
S3A, a file cut short and a replaced one are refused by name and land once remedied, and the
store's credentials appear in no output or ledger row; runner processes given `--landing
hdfs://...` survive a kill inside the landing append and build the marts a local folder gives,
with a secret in the Hadoop settings in none of their outputs, files or tables."""

from __future__ import annotations

import io
import re
import shutil
import uuid
from pathlib import Path

import pytest

from cdc_simulator import landing_writer
from cdc_simulator.simulate import Simulator
from runner.errors import PipelineFailed, UsageError
from runner.run import report
from runner.sources import landing
from runner.sources.folders import display, is_uri, open_folder
from tests.conftest import EVENT_TABLES, Pipeline, copy_project
from tests.expected import check_marts
from tests.scenarios import CHANGE_TABLES, FORMATS, Warehouse, expected_state


def _upload(spark, local: Path, uri: str, replace: tuple[str, ...] = ()) -> None:
    """Copies a local folder's files under `uri`: those not there yet, and those `replace` names
    (relative paths; a copy over a file gives it a new modification time)."""
    jvm = spark._jvm
    fs = jvm.org.apache.hadoop.fs.Path(uri).getFileSystem(spark._jsc.hadoopConfiguration())
    for path in sorted(local.rglob("*")):
        relative = path.relative_to(local).as_posix()
        destination = jvm.org.apache.hadoop.fs.Path(f"{uri}/{relative}")
        if path.is_file() and (relative in replace or not fs.exists(destination)):
            fs.copyFromLocalFile(False, True, jvm.org.apache.hadoop.fs.Path(str(path)), destination)


def test_locations_name_a_local_folder_or_a_uri(tmp_path):
    assert not is_uri(str(tmp_path)) and not is_uri(tmp_path) and not is_uri("C:\\landing")
    assert is_uri("hdfs://nn:8020/landing") and is_uri("abfss://c@acct.dfs.core.windows.net/x")
    assert open_folder(f"file://{tmp_path}").root == tmp_path.resolve()
    assert open_folder(str(tmp_path / "a" / "..")).root == tmp_path.resolve()
    assert display("s3a://AKIAKEY:secret@bucket/landing") == "s3a://bucket/landing"
    assert display("cannot open wasbs://user:pw@c.blob/x: denied") == "cannot open wasbs://c.blob/x: denied"
    assert display("abfss://c@acct.dfs.core.windows.net/x") == "abfss://c@acct.dfs.core.windows.net/x"
    # credentials a file system's error may quote in a URL's query: SAS, presigned S3, WebHDFS tokens
    assert display("GET https://acct.blob.core.windows.net/c/x?sv=2024&sig=AbC%2Bsecret&se=1 failed") == \
        "GET https://acct.blob.core.windows.net/c/x?sv=2024&sig=***&se=1 failed"
    assert display("https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA/x&X-Amz-Signature=f00d") == \
        "https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Signature=***"
    assert display("http://nn:9870/webhdfs/v1/l?op=OPEN&delegation=HAAEdG9rZW4") == \
        "http://nn:9870/webhdfs/v1/l?op=OPEN&delegation=***"
    with pytest.raises(UsageError, match="holds a secret") as refused:
        open_folder("s3a://AKIAKEY:TopSecret@bucket/landing")
    assert "TopSecret" not in str(refused.value)
    # a target whose Spark runs elsewhere lists a URI through fsspec: HDFS by its WebHDFS name
    with pytest.raises(UsageError, match=r"webhdfs://namenode:http-port"):
        open_folder("hdfs://nn:8020/landing", hadoop=False)
    with pytest.raises(UsageError, match=r"gs://bucket/landing: listing it needs the Python package gcsfs "
                                         r"\(pip install 'gcsfs'"):  # not a dependency of the project's
        open_folder("gs://bucket/landing", hadoop=False).exists()


def _hostile_landing(local: Path) -> None:
    """A landing folder of files that land, wait or are refused, each for a reason of its own
    (OUTCOMES), and a writer's uncommitted attempt, which is not seen at all."""
    plain = local / "change_tables" / "dbo_plain"
    managed = local / "change_tables" / "dbo_managed"
    plain.mkdir(parents=True)
    managed.mkdir()
    (plain / "whole.csv").write_text("a,b\n1,2\n")
    (plain / "cut.csv").write_text("a,b\n1,2\n3")
    (plain / "utf16.csv").write_bytes("a,b\r\n1,\u00e9\r\n".encode("utf-16"))
    (plain / "whole.parquet").write_bytes(b"PAR1" + b"\0" * 8 + (8).to_bytes(4, "little") + b"PAR1")
    (plain / "no_footer.parquet").write_bytes(b"PAR1" + b"\0" * 20)
    (plain / "_temporary" / "0").mkdir(parents=True)
    (plain / "_temporary" / "0" / "part.csv").write_text("a\n")
    (managed / "e1.csv").write_text("a\n1\n2\n")
    (managed / "e2.csv").write_text("a\n1\n")
    (managed / "stray.csv").write_text("a\n1\n")
    (managed / "m1.manifest.json").write_text(
        '{"capture_instance": "dbo_managed", "through_lsn": "0x0000002C000003000010", "files": [{"path": "e1.csv", "rows": 2}]}')
    (managed / "m2.manifest.json").write_text(
        '{"capture_instance": "dbo_managed", "through_lsn": "0x0000002C000003000010", "files": [{"path": "e2.csv", "rows": 1, "bytes": 9}]}')
    (managed / "m3.manifest.json").write_text(
        '{"capture_instance": "dbo_managed", "through_lsn": "0x0000002C000003000010", "files": [{"path": "../dbo_plain/whole.csv", "rows": 1}]}')
    (local / "ces" / "hub").mkdir(parents=True)
    (local / "ces" / "hub" / "events.jsonl").write_text('{"id": 1}\n')
    (local / "snapshots" / "customers").mkdir(parents=True)
    (local / "snapshots" / "customers" / "s1.csv").write_text("id\n1\n")


OUTCOMES = {
    "change_tables/dbo_plain/whole.csv": "lands",
    "change_tables/dbo_plain/cut.csv": "refused",
    "change_tables/dbo_plain/utf16.csv": "lands",
    "change_tables/dbo_plain/whole.parquet": "lands",
    "change_tables/dbo_plain/no_footer.parquet": "refused",
    "change_tables/dbo_managed/e1.csv": "lands",
    "change_tables/dbo_managed/m1.manifest.json": "lands",
    "change_tables/dbo_managed/e2.csv": "refused",
    "change_tables/dbo_managed/m2.manifest.json": "refused",
    "change_tables/dbo_managed/m3.manifest.json": "refused",
    "change_tables/dbo_managed/stray.csv": "waiting",
    "ces/hub/events.jsonl": "lands",
    "snapshots/customers/s1.csv": "waiting",
}


def _view(root) -> dict:
    """What the runner makes of each file of a landing folder (its path and time left out)."""
    entries = landing.files_to_land(root, settled=landing.listing(root))
    return {e["relative"]: {k: v for k, v in e.items() if k not in ("path", "modified_ms", "modified_ns")}
            for e in entries}


def _outcomes(view: dict) -> dict:
    return {r: "refused" if "refused" in e else "waiting" if "waiting" in e else "lands" for r, e in view.items()}


@pytest.mark.service
def test_an_hdfs_folder_lands_waits_and_refuses_as_the_same_local_folder(spark, hdfs, tmp_path):
    local = tmp_path / "landing"
    _hostile_landing(local)
    uri = f"{hdfs.uri}/{tmp_path.name}/landing"
    _upload(spark, local, uri)

    remote = _view(open_folder(uri, spark))
    assert remote == _view(local)
    # the same folder through WebHDFS and fsspec, as a Thrift, http or Connect target lists it
    through_fsspec = open_folder(f"{hdfs.webhdfs_uri}/{tmp_path.name}/landing", hadoop=False)
    assert type(through_fsspec).__name__ == "FsspecFolder"
    assert _view(through_fsspec) == remote
    assert through_fsspec.files("change_tables") == open_folder(uri, spark).files("change_tables")
    assert not open_folder(f"{hdfs.webhdfs_uri}/nowhere", hadoop=False).exists()
    assert _outcomes(remote) == OUTCOMES
    assert remote["change_tables/dbo_plain/utf16.csv"]["csv"]["options"]["encoding"] == "UTF-16"
    paths = {e["relative"]: e["path"] for e in landing.files_to_land(open_folder(uri, spark))}
    assert paths["ces/hub/events.jsonl"] == f"{uri}/ces/hub/events.jsonl"
    assert not open_folder(f"{uri}/nowhere", spark).exists()


@pytest.fixture
def s3(spark, monkeypatch):
    """An S3 API server on 127.0.0.1 (moto's, in a thread) with one bucket, and credentials from
    the standard chains only: the AWS environment variables for s3fs (endpoint included,
    AWS_ENDPOINT_URL_S3) and, for the session's JVM, whose environment was fixed when it started,
    Java's system properties, which the AWS SDK's default chain reads first; S3A is given that
    chain, the endpoint and path-style addressing, as a profile would. Yields (bucket, secret,
    boto3 client)."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint, key, secret = f"http://{host}:{port}", "AKIA" + uuid.uuid4().hex[:16].upper(), "Secret-" + uuid.uuid4().hex
    for name, value in {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret, "AWS_DEFAULT_REGION": "us-east-1",
                        "AWS_ENDPOINT_URL_S3": endpoint}.items():
        monkeypatch.setenv(name, value)
    system = spark._jvm.java.lang.System
    conf = spark._jsc.hadoopConfiguration()
    settings = {"fs.s3a.endpoint": endpoint, "fs.s3a.endpoint.region": "us-east-1", "fs.s3a.path.style.access": "true",
                "fs.s3a.connection.ssl.enabled": "false",
                "fs.s3a.aws.credentials.provider": "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"}
    saved = {k: conf.get(k) for k in settings}
    for k, v in settings.items():
        conf.set(k, v)
    system.setProperty("aws.accessKeyId", key)
    system.setProperty("aws.secretAccessKey", secret)
    bucket = "landing-" + uuid.uuid4().hex[:8]
    client = boto3.client("s3")
    client.create_bucket(Bucket=bucket)
    try:
        yield bucket, secret, client
    finally:
        system.clearProperty("aws.accessKeyId")
        system.clearProperty("aws.secretAccessKey")
        for k, v in saved.items():
            conf.unset(k) if v is None else conf.set(k, v)
        server.stop()


def _put(client, bucket: str, local: Path, prefix: str, only: tuple[str, ...] = ()) -> None:
    """Uploads a local folder's files under `prefix` (with `only`, those relative paths)."""
    for path in sorted(local.rglob("*")):
        relative = path.relative_to(local).as_posix()
        if path.is_file() and (not only or relative in only):
            client.upload_file(str(path), bucket, f"{prefix}/{relative}")


@pytest.mark.service
def test_an_s3_folder_lands_waits_and_refuses_as_the_same_local_folder_and_its_batches_build_the_marts(
        spark, s3, tmp_path, change_tables_project):
    bucket, secret, client = s3
    local = tmp_path / "hostile"
    _hostile_landing(local)
    _put(client, bucket, local, "hostile")
    remote = _view(open_folder(f"s3a://{bucket}/hostile", spark))
    assert remote == _view(local) and _outcomes(remote) == OUTCOMES
    # the same folder through s3fs, as a Thrift, http or Connect target lists it (s3:// and s3a://)
    for uri in (f"s3://{bucket}/hostile", f"s3a://{bucket}/hostile"):
        through_fsspec = open_folder(uri, hadoop=False)
        assert type(through_fsspec).__name__ == "FsspecFolder"
        assert _view(through_fsspec) == remote
    assert not open_folder(f"s3a://{bucket}/nowhere", spark).exists()
    assert not open_folder(f"s3://{bucket}/nowhere", hadoop=False).exists()

    # batches exported to S3 and read by the runner's run through S3A: a first one lands; then a
    # file cut short and a landed file replaced are refused by name and hold their tables; once
    # remedied, everything lands once
    local = tmp_path / "landing"
    pipeline = Pipeline(spark, "t_" + uuid.uuid4().hex[:8], f"s3a://{bucket}/landing", project_dir=change_tables_project)
    sim = Simulator(CHANGE_TABLES, seed=43)
    first = sim.run(25)
    landing_writer.write_captured_columns(local, CHANGE_TABLES)
    landing_writer.write_batch(local, "b1", CHANGE_TABLES, first, FORMATS,
                               min_lsn={t.capture_instance: first[0].begin_lsn for t in CHANGE_TABLES})
    _put(client, bucket, local, "landing")
    out = io.StringIO()
    pipeline.run(progress=report.Progress(stream=out))
    assert f"landing new files from s3a://{bucket}/landing" in out.getvalue()
    check_marts(pipeline, sim, first[-1].commit_lsn, transactions=first)

    second = sim.run(15)
    landing_writer.write_batch(local, "b2", CHANGE_TABLES, second, FORMATS)
    csv = next((local / "change_tables").rglob("b2*.csv"))
    whole = csv.read_bytes()
    csv.write_bytes(whole[:len(whole) * 2 // 3])
    first_export = next((local / "change_tables").rglob("b1*.parquet"))
    shutil.copy2(next((local / "change_tables").rglob("b2*.parquet")), first_export)
    cut, changed = (p.relative_to(local).as_posix() for p in (csv, first_export))
    _put(client, bucket, local, "landing", only=(cut, changed, *(p.relative_to(local).as_posix()
                                                                  for p in local.rglob("b2*") if p != csv)))
    with pytest.raises(PipelineFailed):
        pipeline.run(progress=report.Progress(stream=out))
    assert re.search(rf"{re.escape(cut)}: the CSV does not end with a line break", out.getvalue())
    assert re.search(rf"{re.escape(changed)}: changed since it was landed", out.getvalue())
    check_marts(pipeline, sim, first[-1].commit_lsn, transactions=first)

    csv.write_bytes(whole)
    _put(client, bucket, local, "landing", only=(cut,))
    client.delete_object(Bucket=bucket, Key=f"landing/{changed}")
    pipeline.run(progress=report.Progress(stream=out))
    check_marts(pipeline, sim, second[-1].commit_lsn)
    landed = pipeline.rows("select _source_file, count(distinct _batch_id) as batches from {s}_raw.landed_rows"
                           " where landing_kind not in ('landed_files', 'kafka_offsets') group by _source_file")
    assert landed and all(r["batches"] == 1 for r in landed), landed
    # the credentials are in no output and no ledger row
    ledger = pipeline.rows("select to_json(struct(*)) as r from {s}.cdc_runs")
    assert secret not in out.getvalue() and not [r for r in ledger if secret in r["r"]]


@pytest.mark.service
@pytest.mark.processes
def test_runner_processes_land_from_hdfs_through_a_kill_and_keep_secrets(spark, hdfs, tmp_path,
                                                                                    monkeypatch):
    local = tmp_path / "landing"  # where the exports are written before they are uploaded
    uri = f"{hdfs.uri}/{tmp_path.name}/landing"
    project = copy_project(tmp_path / "project", {}, drop=EVENT_TABLES)
    # a credential as a user gives one: a Hadoop setting of the profile, from the environment
    secret = "Secret-" + uuid.uuid4().hex
    monkeypatch.setenv("TEST_S3A_SECRET", secret)
    profiles = project / "profiles.yml"
    profiles.write_text(profiles.read_text().replace(
        "      server_side_parameters:\n", "      server_side_parameters:\n"
        "        spark.hadoop.fs.s3a.secret.key: \"{{ env_var('TEST_S3A_SECRET') }}\"\n", 1))
    wh = Warehouse(spark, tmp_path / "state", project, uri, CHANGE_TABLES)
    outputs = []
    sim = Simulator(CHANGE_TABLES, seed=41)

    def land(batch: str, transactions, first: bool = False) -> None:
        if first:
            landing_writer.write_captured_columns(local, CHANGE_TABLES)
        landing_writer.write_batch(local, batch, CHANGE_TABLES, transactions, FORMATS,
                                   min_lsn={t.capture_instance: transactions[0].begin_lsn for t in CHANGE_TABLES}
                                   if first else None)

    def check(uppers: dict[str, int]) -> None:
        for spec in CHANGE_TABLES:
            for mart in ("current", "history"):
                assert wh.mart_state(spec, mart) == expected_state(spec, sim, uppers[spec.name], mart), f"{spec.name}_{mart}"

    first = sim.run(30)
    land("b1", first, first=True)
    _upload(spark, local, uri)
    out = wh.run()
    outputs.append(out)
    assert f"landing new files from {uri}" in out
    check({t.name: first[-1].commit_lsn for t in CHANGE_TABLES})

    # killed inside the landing append (its data files written, its commit not yet)
    second = sim.run(20)
    land("b2", second)
    _upload(spark, local, uri)
    files, commits = wh.data_files("landed_rows"), wh.commits("landed_rows")
    out = wh.kill_when(lambda: wh.data_files("landed_rows") > files, "landing append")
    assert "dbt build" not in out
    outputs.append(out)
    inside = wh.commits("landed_rows") == commits

    # the re-run lands the killed run's batch once and builds the marts (a file cut short and a
    # replaced one on a remote folder: the S3 test above)
    out = wh.run()
    outputs.append(out)
    check({t.name: second[-1].commit_lsn for t in CHANGE_TABLES})
    # one commit of the raw table for the re-run (and one for the killed run, had it committed)
    assert wh.commits("landed_rows") == commits + (1 if inside else 2)
    by_file = {}
    for r in wh.rows("landed_rows"):
        by_file.setdefault(r["_source_file"], set()).add(r["_batch_id"])
    assert all(len(batches) == 1 for batches in by_file.values()), "a file landed in two batches"

    # the secret is in no output, no file the runs wrote (project, dbt's target and logs, state),
    # no table
    assert not [i for i, out in enumerate(outputs) if secret in out]
    leaked = [p for p in tmp_path.rglob("*") if p.is_file() and p != profiles and secret.encode() in p.read_bytes()]
    assert leaked == []
    tables = [p.parent for p in (tmp_path / "state").rglob("_delta_log")]
    assert len(tables) > 10
    for table in tables:
        rows = spark.read.format("delta").load(str(table)).selectExpr("to_json(struct(*)) as r").collect()
        assert not [r for r in rows if secret in r["r"]], f"the secret is in {table.name}"
