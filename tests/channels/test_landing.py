"""Landing in SQL (macro land_files through dbt run-operation, the one path for the embedded
session and a cluster): every record lands as text exactly as the raw table's contract says,
a file lands once (identified by path, size and modification time: a landed file that changed is
refused), in one Delta commit per batch; a file cut short is refused alone, and one that looks
whole but Spark cannot read fails the batch with Spark's reason."""

from __future__ import annotations

import copy
import re

import pytest

from runner.errors import UsageError
from runner.run.dbt import Dbt
from runner.sources import landing
from tests.conftest import PROJECT_DIR


def _landed(pipeline, batch: str) -> list[dict]:
    return pipeline.rows(
        "select landing_kind, entity, _source_file, row_values, raw_text from {s}_raw.landed_rows"
        f" where _batch_id = '{batch}' and landing_kind != 'landed_files' order by _source_file, raw_text, to_json(row_values)")


def _records(pipeline) -> list[dict]:
    return pipeline.rows("select _source_file, _batch_id, row_values from {s}_raw.landed_rows"
                         " where landing_kind = 'landed_files' order by _source_file")


def test_records_land_as_text_once_per_file(pipeline):
    folder = pipeline.landing / "change_tables" / "dbo_things"
    folder.mkdir(parents=True)
    pipeline.spark.createDataFrame(
        [(1, bytearray(b"\x00\xab\x10"), None), (2, None, "two")], "Id int, `__$Mask` binary, Note string",
    ).coalesce(1).write.parquet(str(folder / "export.parquet"))
    # glob characters and a quote in the name are taken literally; the header's case is lowered
    (folder / "we[ir]d {it's}.csv").write_text("Id,Note\n3,three\n4,\n")
    events = pipeline.landing / "ces"
    events.mkdir()
    (events / "lines.jsonl").write_text('{"id": "e1", "data": {"n": 1}}\n\n   \nnot json\n[1, 2]\n')
    dbt = Dbt(PROJECT_DIR, "local")

    counts = landing.land(dbt, pipeline.landing, pipeline.target.raw_schema, "b1")["counts"]

    assert counts == {("change_tables", "dbo_things"): 4, ("ces", "default"): 3}
    parquet = next(folder.glob("export.parquet/*.parquet")).relative_to(pipeline.landing).as_posix()
    assert _landed(pipeline, "b1") == [
        {"landing_kind": "ces", "entity": "default", "_source_file": "ces/lines.jsonl",
         "row_values": None, "raw_text": "[1, 2]"},
        {"landing_kind": "ces", "entity": "default", "_source_file": "ces/lines.jsonl",
         "row_values": None, "raw_text": "not json"},
        {"landing_kind": "ces", "entity": "default", "_source_file": "ces/lines.jsonl",
         "row_values": {"id": "e1", "data": '{"n":1}'}, "raw_text": '{"id": "e1", "data": {"n": 1}}'},
        {"landing_kind": "change_tables", "entity": "dbo_things", "_source_file": parquet,
         "row_values": {"id": "1", "__$mask": "0x00AB10", "note": None}, "raw_text": None},
        {"landing_kind": "change_tables", "entity": "dbo_things", "_source_file": parquet,
         "row_values": {"id": "2", "__$mask": None, "note": "two"}, "raw_text": None},
        {"landing_kind": "change_tables", "entity": "dbo_things", "_source_file": "change_tables/dbo_things/we[ir]d {it's}.csv",
         "row_values": {"id": "3", "note": "three"}, "raw_text": None},
        {"landing_kind": "change_tables", "entity": "dbo_things", "_source_file": "change_tables/dbo_things/we[ir]d {it's}.csv",
         "row_values": {"id": "4", "note": None}, "raw_text": None},
    ]
    # each file has its record, in the same commit as its rows (the first records with a marker)
    files = ["ces/lines.jsonl", parquet, "change_tables/dbo_things/we[ir]d {it's}.csv"]
    assert _records(pipeline) == [{"_source_file": None, "_batch_id": "b1", "row_values": {"marker": "records kept from here on"}}] + [
        {"_source_file": f, "_batch_id": "b1", "row_values": {"landing_kind": f.split("/")[0], "entity": f.split("/")[1]
                                                              if f.startswith("change") else "default"}} for f in files]
    # landed files are never landed again; the batch was one commit of the raw table
    assert landing.land(dbt, pipeline.landing, pipeline.target.raw_schema, "b2")["counts"] == {}
    appends = [r for r in pipeline.rows("describe history {s}_raw.landed_rows") if r["operation"] == "WRITE"]
    assert len(appends) == 1
    # a raw table landed before files had records (an earlier release) gets them from its rows
    # once, with the next batch; nothing lands again
    pipeline.rows("delete from {s}_raw.landed_rows where landing_kind = 'landed_files'")
    assert landing.land(dbt, pipeline.landing, pipeline.target.raw_schema, "b2u")["counts"] == {}
    assert [(r["_source_file"], r["_batch_id"]) for r in _records(pipeline)] == [(None, "b2u")] + [(f, "b2u") for f in sorted(files)]
    assert landing.land(dbt, pipeline.landing, pipeline.target.raw_schema, "b2v")["counts"] == {}
    assert len(_records(pipeline)) == 4
    identity = pipeline.rows("select distinct _source_file, _source_size, _source_modified_ms from {s}_raw.landed_rows"
                             " where _source_file like '%.csv'")
    csv = folder / "we[ir]d {it's}.csv"
    assert identity == [{"_source_file": "change_tables/dbo_things/we[ir]d {it's}.csv", "_source_size": csv.stat().st_size,
                         "_source_modified_ms": csv.stat().st_mtime_ns // 1_000_000}]

    # a landed file that changed (size or time) is refused alone, naming it and the remedy; the rest lands
    (folder / "new.csv").write_text("Id\n9\n")
    csv.write_text("Id,Note\n3,three\n4,four\n")
    outcome = landing.land(dbt, pipeline.landing, pipeline.target.raw_schema, "b2b")
    assert outcome["counts"] == {("change_tables", "dbo_things"): 1}
    assert len(outcome["refused"]) == 1 and re.match(
        r"change_tables/dbo_things/we\[ir\]d \{it's\}.csv: changed since it was landed \(landed: 19 bytes.*now: 23 bytes.*"
        r"Exports are immutable: put the whole file under a new name", outcome["refused"][0]), outcome["refused"]
    assert [r["_source_file"] for r in _landed(pipeline, "b2b")] == ["change_tables/dbo_things/new.csv"]
    (folder / "new.csv").unlink()
    csv.unlink()

    # a file whose size or time changed between the runner's two listings (still being written), or
    # that appeared after the first, waits; one that a second listing finds unchanged lands
    (folder / "growing.csv").write_text("Id\n7\n")
    (folder / "steady.csv").write_text("Id\n11\n")
    first = landing.listing(pipeline.landing)
    with (folder / "growing.csv").open("a") as growing:
        growing.write("8\n")
    (folder / "appeared.csv").write_text("Id\n10\n")
    files = {f["relative"]: f for f in landing.files_to_land(pipeline.landing, settled=first)}
    assert files["change_tables/dbo_things/growing.csv"]["waiting"].startswith("still being written")
    assert files["change_tables/dbo_things/appeared.csv"].get("unsettled") is True
    assert "waiting" not in files["change_tables/dbo_things/steady.csv"]
    files = {f["relative"]: f for f in landing.files_to_land(pipeline.landing, settled=landing.listing(pipeline.landing))}
    assert not any("waiting" in f for f in files.values())
    (folder / "growing.csv").unlink()
    (folder / "appeared.csv").unlink()
    (folder / "steady.csv").unlink()

    # a file cut short (no Parquet footer) is refused before Spark reads it: the rest lands
    (folder / "broken.parquet").write_text("not parquet")
    (folder / "fine.csv").write_text("Id\n5\n")
    assert landing.land(dbt, pipeline.landing, pipeline.target.raw_schema, "b3")["counts"] == {("change_tables", "dbo_things"): 1}
    assert [r["_source_file"] for r in _landed(pipeline, "b3")] == ["change_tables/dbo_things/fine.csv"]
    # a whole-looking file whose footer does not parse is refused alone too, naming why: its
    # footer is read in Python before anything lands, for its columns and rows
    (folder / "broken.parquet").write_bytes(b"PAR1" + b"garbage" * 4 + (28).to_bytes(4, "little") + b"PAR1")
    (folder / "fine2.csv").write_text("Id\n6\n")
    outcome = landing.land(dbt, pipeline.landing, pipeline.target.raw_schema, "b4")
    assert outcome["counts"] == {("change_tables", "dbo_things"): 1}
    assert len(outcome["refused"]) == 1 and re.match(
        r"change_tables/dbo_things/broken.parquet: not a readable Parquet file \(its footer does not parse: .+\); "
        r"re-export it", outcome["refused"][0]), outcome["refused"]
    assert [r["_source_file"] for r in _landed(pipeline, "b4")] == ["change_tables/dbo_things/fine2.csv"]


def test_csv_dialect_writers_files_and_names_spark_cannot_read(tmp_path):
    """Without Spark: each CSV file gets RFC 4180 (or its folder's declared dialect), the encoding its
    byte-order mark names and the record separator of its header row; what writers leave beside
    their output is not data; a path Spark cannot read is refused alone, naming the remedy."""
    folder = tmp_path / "change_tables" / "dbo_things"
    (folder / "_temporary" / "0" / "task_1").mkdir(parents=True)
    (folder / "_temporary" / "0" / "task_1" / "part-0.csv").write_text("a\n1\n")
    (folder / "_SUCCESS").write_text("")
    (folder / ".part-0.csv.crc").write_bytes(b"crc")
    (folder / "crlf.csv").write_bytes(b"\xef\xbb\xbfa,b\r\n1,\"x\r\ny\"\r\n")
    (folder / "lf.csv").write_bytes(b"a,b\n1,2\n")
    (folder / "wide.csv").write_bytes("a,b\r\n1,\"é\"\r\n".encode("utf-16"))
    (folder / "wide_cut.csv").write_bytes("a,b\r\n1,2".encode("utf-16"))
    (folder / "at 12:05.csv").write_text("a\n1\n")
    (folder / "twice.csv").write_text("a,\"A\"\n1,2\n")
    semi = tmp_path / "snapshots" / "things"
    semi.mkdir(parents=True)
    (semi / "s.csv").write_text("a;b\n1;2\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / "dbt_project.yml").write_text("vars:\n  cdc_csv_dialects:\n    snapshots/things: {sep: ';', escape: '\\'}\n")

    got = {e["relative"]: e for e in landing.files_to_land(tmp_path, landing.csv_dialects(project))}

    assert sorted(got) == [f"change_tables/dbo_things/{n}" for n in ("at 12:05.csv", "crlf.csv", "lf.csv", "twice.csv", "wide.csv",
                                                                        "wide_cut.csv")] + [
        "snapshots/things/s.csv"]
    rfc = {"sep": ",", "quote": '"', "escape": '"', "nullValue": ""}
    assert got["change_tables/dbo_things/crlf.csv"]["csv"] == {"options": {**rfc, "encoding": "UTF-8", "lineSep": "\r\n"},
                                                           "header": ["a", "b"]}
    assert got["change_tables/dbo_things/lf.csv"]["csv"]["options"] == {**rfc, "encoding": "UTF-8", "lineSep": "\n"}
    assert got["change_tables/dbo_things/wide.csv"]["csv"] == {"options": {**rfc, "encoding": "UTF-16", "lineSep": "\r\n"},
                                                           "header": ["a", "b"]}
    assert "refused" not in got["change_tables/dbo_things/wide.csv"]
    assert "last row was cut short" in got["change_tables/dbo_things/wide_cut.csv"]["refused"]
    assert got["snapshots/things/s.csv"]["csv"] == {"options": {**rfc, "sep": ";", "escape": "\\", "encoding": "UTF-8", "lineSep": "\n"},
                                                    "header": ["a", "b"]}
    assert "names the column A twice" in got["change_tables/dbo_things/twice.csv"]["refused"]
    assert "holds ':'" in got["change_tables/dbo_things/at 12:05.csv"]["refused"]
    assert "rename it" in got["change_tables/dbo_things/at 12:05.csv"]["refused"]

    for bad in ("{snapshots/things: {delimiter: ';'}}", "{elsewhere: {sep: ';'}}", "[sep]", "{snapshots: {sep: 1}}"):
        (project / "dbt_project.yml").write_text(f"vars:\n  cdc_csv_dialects: {bad}\n")
        with pytest.raises(UsageError, match="cdc_csv_dialects"):
            landing.csv_dialects(project)


def test_csv_as_sql_server_tools_write_it_lands_value_for_value(pipeline):
    """RFC 4180 as bcp, SSIS, Azure Data Factory and Python's csv module write it: a quoted value
    ending in a backslash, doubled quotes, a CRLF and a LF inside quoted values, a byte-order mark,
    UTF-16; each lands as the value it was (an empty field, quoted or not, is NULL)."""
    folder = pipeline.landing / "change_tables" / "dbo_dialect"
    folder.mkdir(parents=True)
    values = ["ends in \\", 'say "hi"', "two\r\nlines", "lf\nonly", "comma, inside", "é ü 名", None]

    def text(end):
        quoted = ['"' + v.replace('"', '""') + '"' if v is not None else "" for v in values]
        return "".join(f"{line}{end}" for line in ["Id,Note,Other", *(f"{i},{q},x" for i, q in enumerate(quoted))])

    (folder / "utf8.csv").write_bytes(("\ufeff" + text("\r\n")).encode("utf-8"))
    (folder / "utf16.csv").write_bytes(text("\r\n").encode("utf-16"))
    (folder / "lf.csv").write_bytes(text("\n").encode("utf-8"))

    landing.land(Dbt(PROJECT_DIR, "local"), pipeline.landing, pipeline.target.raw_schema, "dialect")

    got = {}
    for r in _landed(pipeline, "dialect"):
        got.setdefault(r["_source_file"].rsplit("/", 1)[1], []).append(r["row_values"])
    expected = [{"id": str(i), "note": v, "other": "x"} for i, v in enumerate(values)]
    for name in ("utf8.csv", "utf16.csv", "lf.csv"):
        assert sorted(got[name], key=lambda r: int(r["id"])) == expected, name


def test_an_export_without_a_declared_column_is_refused_and_extra_columns_are_noted(pipeline):
    """An export of a declared capture instance must carry its declared captured columns: one
    with a column renamed (`email` -> `email_address`) or missing is refused, naming the columns
    and the remedy, and so is the manifest that lists it; columns nobody declared land (the raw
    table keeps every column) and are noted once."""
    meta = "__$start_lsn,__$seqval,__$operation,__$update_mask"
    row = "0x0000002C000003000010,0x0000002C000003000010,2,0x3F"
    folder = pipeline.landing / "change_tables" / "dbo_customers"
    folder.mkdir(parents=True)
    (folder / "renamed.csv").write_text(f"{meta},customer_id,full_name,email_address,credit_limit,is_active,created_at\n"
                                        f"{row},1,Ann,a@x,10.00,1,2026-01-01\n")
    (folder / "extra.csv").write_text(f"{meta},customer_id,full_name,email,credit_limit,is_active,created_at,loyalty\n"
                                      f"{row},2,Bo,b@x,10.00,1,2026-01-01,gold\n")
    pipeline.spark.createDataFrame([(3, "Cy")], "customer_id int, full_name string").coalesce(1).write.parquet(
        str(folder / "narrow.parquet"))
    lines = pipeline.landing / "change_tables" / "sales_order_lines"
    lines.mkdir(parents=True)
    (lines / "e1.csv").write_text(f"{meta},order_id,line_no,product_code,quantity,unit_price,modified_at\n{row},1,1,p,1,1.00,2026-01-01\n")
    (lines / "e1.manifest.json").write_text(
        '{"capture_instance": "sales_order_lines", "after_lsn": null, "through_lsn": "0x0000002C000003000010",'
        ' "files": [{"path": "e1.csv", "rows": 1}]}')

    outcome = landing.land(Dbt(PROJECT_DIR, "local"), pipeline.landing, pipeline.target.raw_schema, "drift")

    refused = dict(r.split(": ", 1) for r in outcome["refused"])
    assert sorted(refused) == sorted(["change_tables/dbo_customers/renamed.csv", "change_tables/sales_order_lines/e1.csv",
                               "change_tables/sales_order_lines/e1.manifest.json",
                               *(f"change_tables/dbo_customers/narrow.parquet/{p.name}" for p in (folder / "narrow.parquet").glob("*.parquet"))])
    assert refused["change_tables/dbo_customers/renamed.csv"].startswith(
        "its columns lack email, declared for capture instance dbo_customers (it has __$start_lsn")
    assert "declare the new one" in refused["change_tables/dbo_customers/renamed.csv"]
    assert refused["change_tables/sales_order_lines/e1.csv"].startswith("its columns lack notes")
    assert refused["change_tables/sales_order_lines/e1.manifest.json"] == \
        "export manifest: its file change_tables/sales_order_lines/e1.csv is refused"
    narrow = next(v for k, v in refused.items() if k.endswith(".parquet"))
    assert narrow.startswith("its columns lack email, credit_limit, is_active, created_at")
    assert outcome["ignored"] == [("change_tables/dbo_customers/extra.csv: column(s) loyalty not declared for capture "
                                  "instance dbo_customers, not applied")]
    assert outcome["counts"] == {("change_tables", "dbo_customers"): 1}
    assert [r["row_values"]["loyalty"] for r in _landed(pipeline, "drift")] == ["gold"]


def _entry(relative: str, fmt: str = "csv", **extra) -> dict:
    kind, entity = relative.split("/")[:2]
    entry = {"kind": kind, "entity": entity, "path": "/l/" + relative, "relative": relative, "format": fmt,
             "size": 10, "modified_ms": 1000}
    if fmt == "csv":
        entry["csv"] = {"header": ["Id", "Email"], "options": {}}
    return {**entry, **extra}


def test_the_intake_skips_landed_files_refuses_changed_ones_and_keeps_files_to_lands_marks():
    files = [_entry("change_tables/t/same.csv"), _entry("change_tables/t/grown.csv", size=11), _entry("change_tables/t/new.csv"),
             _entry("change_tables/t/cut.csv", refused="cut short"),
             _entry("change_tables/t/wet.csv", waiting="still being written", wait="unsettled")]
    landed = {"change_tables/t/same.csv": [10, 1000], "change_tables/t/grown.csv": [10, 1000]}

    files.append(_entry("change_tables/t/m.manifest.json", "manifest", refused="its file cut.csv is refused: cut short",
                        refused_for="change_tables/t/cut.csv"))
    taken = landing.screen(files, landed)

    assert [f["relative"] for f in taken.accepted] == ["change_tables/t/new.csv"]
    # files_to_land's mark of a file refused for another's sake is kept
    assert taken.for_another == {"change_tables/t/m.manifest.json": "change_tables/t/cut.csv"}
    assert taken.refused["change_tables/t/cut.csv"] == "cut short"
    assert taken.refused["change_tables/t/grown.csv"].startswith(
        "changed since it was landed (landed: 10 bytes modified at 1000 ms; now: 11 bytes modified at 1000 ms)")
    assert taken.facts()["waiting"] == [{"file": "change_tables/t/wet.csv", "reason": "still being written", "wait": "unsettled"}]
    # nothing to read: CSV headers are known, no manifest, no Parquet file
    assert landing.probe_request(taken, landed) is None


def test_the_intake_checks_manifests_and_declared_columns_against_what_the_probe_read():
    listed = ["change_tables/t/a.csv", "change_tables/t/b.parquet", "change_tables/t/old.csv"]
    manifest = _entry("change_tables/t/m.manifest.json", "manifest", files=listed, owner="capture_instance",
                      lsns={"after_lsn": None, "through_lsn": "0x0000002C00000300017C"},
                      rows_by_file={"change_tables/t/a.csv": 2, "change_tables/t/b.parquet": 3, "change_tables/t/old.csv": 1})
    files = [manifest, _entry("change_tables/t/a.csv", expected_columns=["id", "email"]),
             _entry("change_tables/t/b.parquet", "parquet", expected_columns=["id", "email"]),
             _entry("change_tables/u/c.csv", expected_columns=["id", "email", "name"])]
    landed = {"change_tables/t/old.csv": [10, 1000]}
    taken = landing.screen(files + [_entry("change_tables/t/old.csv")], landed)

    request = landing.probe_request(taken, landed)

    # a Parquet file's rows and columns are in its footer (parquet_footer), read without Spark
    assert [(f["relative"], f["count"]) for f in request["files"]] == [("change_tables/t/a.csv", True)]
    assert request["count_landed"] == ["change_tables/t/old.csv"] and request["lsns"] == ["0x0000002C00000300017C"]
    probed = {"columns": {"change_tables/t/b.parquet": [["Id", "int"], ["Email", "string"], ["Loyalty", "int"]]},
              "rows": {"change_tables/t/a.csv": 2, "change_tables/t/b.parquet": 3, "change_tables/t/old.csv": 1},
              "lsns": {"0x0000002C00000300017C": "0000002C00000300017C"}}
    whole = copy.deepcopy(taken)
    landing.check_probed(whole, copy.deepcopy(probed))
    # everything lands: the manifest with canonical LSNs, each file with its columns; the extra
    # column is noted; the table whose export lacks a declared column is refused alone
    assert [f["relative"] for f in whole.accepted] == ["change_tables/t/m.manifest.json", "change_tables/t/a.csv",
                                                       "change_tables/t/b.parquet"]
    assert whole.accepted[0]["lsns"] == {"after_lsn": None, "through_lsn": "0000002C00000300017C"}
    assert whole.accepted[2]["columns"] == probed["columns"]["change_tables/t/b.parquet"]
    assert whole.ignored == ["change_tables/t/b.parquet: column(s) loyalty not declared for capture instance t, not applied"]
    assert list(whole.refused) == ["change_tables/u/c.csv"] and whole.refused["change_tables/u/c.csv"].startswith(
        "its columns lack name, declared for capture instance u (it has id, email)")

    # a file with fewer rows than its manifest says refuses it, the manifest and the manifest's other files
    short = copy.deepcopy(taken)
    landing.check_probed(short, {**copy.deepcopy(probed), "rows": {**probed["rows"], "change_tables/t/b.parquet": 2}})
    assert short.accepted == []
    assert short.refused["change_tables/t/b.parquet"].startswith("2 rows, but its export manifest change_tables/t/m.manifest.json says 3")
    assert short.refused["change_tables/t/m.manifest.json"] == "export manifest: its file change_tables/t/b.parquet is refused"
    assert short.refused["change_tables/t/a.csv"] == ("its export manifest change_tables/t/m.manifest.json is refused: "
                                                      "export manifest: its file change_tables/t/b.parquet is refused")
    # the two refused for another's sake are told apart from the one refused for its own reason
    assert short.for_another == {"change_tables/t/m.manifest.json": "change_tables/t/b.parquet",
                                 "change_tables/t/a.csv": "change_tables/t/m.manifest.json"}
    assert short.facts()["refused_for_another"] == ["change_tables/t/a.csv", "change_tables/t/m.manifest.json"]
    # an LSN that does not parse refuses the manifest and its files
    bad = copy.deepcopy(taken)
    landing.check_probed(bad, {**copy.deepcopy(probed), "lsns": {"0x0000002C00000300017C": None}})
    assert bad.refused["change_tables/t/m.manifest.json"] == "export manifest: through_lsn 0x0000002C00000300017C is not an LSN"
    assert "change_tables/t/a.csv" in bad.refused and bad.accepted == []


def test_a_parquet_files_columns_and_rows_are_read_from_its_footer_alone(tmp_path):
    """Without Spark: the footer's bytes alone give a Parquet file's columns (byte strings, whatever
    their Arrow form, as binary, which lands as 0x hex) and its rows; a footer that does not parse
    is refused naming why."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from runner.sources.folders import LocalFolder

    table = pa.table({"Id": pa.array([1, 2], pa.int32()), "Email": ["a", "b"], "Blob": [b"\x01", None],
                      "Hash": pa.array([b"ab", b"cd"], pa.binary(2)), "Token": pa.array([b"x", b"x"]).dictionary_encode(),
                      "Uid": pa.array([bytes(16)] * 2, pa.uuid()), "Price": pa.array([1, 2], pa.decimal128(10, 2))})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=1)
    size = (tmp_path / "t.parquet").stat().st_size

    columns, rows = landing.parquet_footer(LocalFolder(tmp_path), "t.parquet", size)

    assert rows == 2
    assert columns == [["Id", "int32"], ["Email", "string"], ["Blob", "binary"], ["Hash", "binary"], ["Token", "binary"],
                       ["Uid", "binary"], ["Price", "decimal128(10, 2)"]]
    (tmp_path / "bad.parquet").write_bytes(b"PAR1" + b"garbage" * 4 + (28).to_bytes(4, "little") + b"PAR1")
    with pytest.raises(landing.ParquetFooterError, match=r"not a readable Parquet file \(its footer does not parse"):
        landing.parquet_footer(LocalFolder(tmp_path), "bad.parquet", 40)


def test_nothing_a_writer_leaves_uncommitted_lands_in_any_folder_layout(tmp_path):
    """Without Spark: in a flat ces/ or debezium/ folder as in a topic's or capture instance's, a
    writer's `_temporary/` attempt, a `.spark-staging` folder, `_SUCCESS`, `.crc` and in-progress
    files are not data; a topic or capture instance whose name starts with `_` (Kafka allows it) is."""
    files = {
        # uncommitted or not data
        "debezium/_temporary/0/task_20261128_0001_m_000000/part-00000.json": "{}\n",
        "ces/_temporary/0/_temporary/attempt_1/part-00000.json": "{}\n",
        "ces/.spark-staging-5c1e/part-00000.json": "{}\n",
        "ces/_SUCCESS": "", "ces/.part-00000.json.crc": "crc", "ces/_part-00001.json": "{}\n",
        "ces/.part-00002.json.inprogress.0d4f": "{}\n",
        "debezium/_orders/_temporary/0/part-00000.json": "{}\n",
        "change_tables/_temporary/0/task_1/part-0.csv": "a\n1\n",
        "change_tables/dbo_things/_temporary/0/task_1/part-0.csv": "a\n1\n",
        "change_tables/dbo_things/.hive-staging_1/part-0.csv": "a\n1\n",
        # data
        "debezium/part-00000.json": "{}\n", "debezium/_orders/part-00000.json": "{}\n",
        "ces/hub/part-00000.json": "{}\n", "change_tables/_legacy_things/e1.csv": "a\n1\n",
        "change_tables/dbo_things/2026/11/e2.csv": "a\n1\n",
    }
    for relative, text in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)

    found = {(f.kind, f.entity, f.relative) for f in landing.discover(tmp_path)}

    assert found == {("debezium", "default", "debezium/part-00000.json"), ("debezium", "_orders", "debezium/_orders/part-00000.json"),
                     ("ces", "hub", "ces/hub/part-00000.json"),
                     ("change_tables", "_legacy_things", "change_tables/_legacy_things/e1.csv"),
                     ("change_tables", "dbo_things", "change_tables/dbo_things/2026/11/e2.csv")}


def test_a_manifest_and_the_file_refused_for_each_others_sake_name_it(tmp_path):
    folder = tmp_path / "change_tables" / "dbo_t"
    folder.mkdir(parents=True)
    (folder / "e1.csv").write_text("a\n1\n")
    (folder / "e2.csv").write_text("a\n1\n")
    (folder / "m.manifest.json").write_text(
        '{"capture_instance": "dbo_t", "through_lsn": "0x0000002C000003000010", "files": '
        '[{"path": "e1.csv", "rows": 1, "bytes": 99}, {"path": "e2.csv", "rows": 1}]}')
    entries = {e["relative"]: e for e in landing.files_to_land(tmp_path, settled=landing.listing(tmp_path))}
    e1, e2, m = (f"change_tables/dbo_t/{n}" for n in ("e1.csv", "e2.csv", "m.manifest.json"))
    assert entries[e1]["refused"].startswith("4 bytes, but its export manifest says 99") and "refused_for" not in entries[e1]
    assert entries[m]["refused_for"] == e1 and entries[e2]["refused_for"] == m
    assert landing.screen(list(entries.values()), {}).for_another == {m: e1, e2: m}
