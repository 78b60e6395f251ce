"""The aging phase's Delta writer (cdc_tooling/delta_writer.py) writes what Delta writes: deletion
vectors and Z85 descriptors as Delta's protocol pins them (its own examples), statistics as Delta
computes them (its own string truncation cases, and Spark's stats of the same rows), and a MERGE
whose commit, deletion vectors and rows equal Spark's MERGE of the same keys on a copy of the same
table. (The fast tests run in milliseconds; the Spark one writes one small table, about 10 s.)"""

from __future__ import annotations

import json
import shutil
import uuid
from datetime import date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_tooling import delta_writer as dw

ASCII_MAX, UTF8_MAX = dw.ASCII_MAX, dw.UTF8_MAX


def test_z85_encodes_a_uuid_as_delta_names_a_deletion_vector_file():
    # PROTOCOL.md "JSON Example 1": prefix "ab", then the UUID d2c639aa-... in 20 characters
    name = uuid.UUID("d2c639aa-8816-431a-aaf6-d3fe2512ff61")
    assert dw.z85_encode(name.bytes) == "^-aqEH.-t@S}K{vb[*k^"
    assert dw.z85_decode("^-aqEH.-t@S}K{vb[*k^") == name.bytes
    with pytest.raises(ValueError, match="4-byte blocks"):
        dw.z85_encode(b"abc")


def test_an_inline_deletion_vector_of_the_protocol_reads_as_its_rows():
    # PROTOCOL.md "JSON Example 3" (Delta's native format): rows 3, 4, 7, 11, 18, 29
    data = dw.z85_decode("wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L")
    assert sorted(dw.dv_rows(data)) == [3, 4, 7, 11, 18, 29]
    assert dw.read_dv(None, {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
                             "sizeInBytes": 40, "cardinality": 6}) == {3, 4, 7, 11, 18, 29}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sets(st.integers(0, 2**40), max_size=300), min_size=1, max_size=4))
def test_deletion_vectors_written_to_a_file_read_back_as_their_rows(tmp_path_factory, bitmaps):
    root = tmp_path_factory.mktemp("dv")
    descriptors = dw.write_dv_file(root, bitmaps)
    files = list(root.glob("deletion_vector_*.bin"))
    assert len(files) == 1 and files[0].read_bytes()[0] == 1  # one file, format version 1
    for rows, descriptor in zip(bitmaps, descriptors):
        assert descriptor["cardinality"] == len(rows) and descriptor["storageType"] == "u"
        assert dw.read_dv(root, descriptor) == rows


def test_a_deletion_vector_whose_checksum_does_not_match_is_refused(tmp_path):
    (descriptor,) = dw.write_dv_file(tmp_path, [{1, 2, 3}])
    path = next(tmp_path.glob("deletion_vector_*.bin"))
    data = bytearray(path.read_bytes())
    data[-6] ^= 0xFF  # a byte of the bitmap
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum"):
        dw.read_dv(tmp_path, descriptor)


@pytest.mark.parametrize(("text", "prefix", "expected"), [
    # Delta's StatsCollectionSuite "Truncate max string" (the cases of unambiguous characters)
    ("abcd", 0, None),
    (f"a{UTF8_MAX}d", 2, f"a{UTF8_MAX}{ASCII_MAX}"),
    ("abcd", 6, "abcd"),
    ("abcdef", 6, "abcdef"),
    ("abcdef-abcdef\ufffd", 6, f"abcdef{ASCII_MAX}"),
    ("abcdef\ufffdabcdef", 6, f"abcdef{UTF8_MAX}"),
    ("漢字仮名한글தமி", 6, f"漢字仮名한글{UTF8_MAX}"),
    ("漢字仮名한글", 6, "漢字仮名한글"),
    ("abcdef🚀", 6, f"abcdef{UTF8_MAX}"),
    (UTF8_MAX * 4, 1, None),
    (UTF8_MAX * 4, 4, UTF8_MAX * 4),
    ("abcdefghijklm💞😉💕\n🥀🌹💐🌺🌷🌼🌻🌷🥀", 32, f"abcdefghijklm💞😉💕\n🥀🌹💐🌺🌷🌼{UTF8_MAX}"),
])
def test_a_string_maximum_is_cut_as_delta_cuts_it(text, prefix, expected):
    assert dw.truncate_max(text, prefix) == expected


@pytest.mark.parametrize(("text", "prefix", "expected"), [
    ("abcd", 3, "abc"), ("abcdef", 6, "abcdef"), (UTF8_MAX * 4, 1, UTF8_MAX), ("a🚀b", 2, "a🚀"),
])
def test_a_string_minimum_is_cut_on_java_characters_never_inside_a_pair(text, prefix, expected):
    assert dw.truncate_min(text, prefix) == expected


SCHEMA = {"type": "struct", "fields": [
    {"name": "id", "type": "long"}, {"name": "amount", "type": "decimal(12,2)"}, {"name": "name", "type": "string"},
    {"name": "at", "type": "timestamp"}, {"name": "day", "type": "date"}, {"name": "flag", "type": "boolean"},
    {"name": "tags", "type": {"type": "array", "elementType": "string"}},
    {"name": "kind", "type": "string"}]}


def test_statistics_are_delta_s_for_every_kind_of_column():
    rows = pa.table({
        "id": pa.array([3, 1, None], pa.int64()),
        "amount": pa.array([Decimal("10.50"), Decimal("-2.00"), None], pa.decimal128(12, 2)),
        "name": ["b" * 40, "a", None],
        "at": pa.array([datetime(2026, 1, 2, 3, 4, 5, 678901), datetime(2025, 1, 1), None], pa.timestamp("ns")),
        "day": pa.array([date(2026, 1, 2), None, None], pa.date32()),
        "flag": [True, False, None],
        "tags": [["x"], None, []],
        "kind": ["p", "p", "p"],
    })
    found = json.loads(dw.stats(rows, SCHEMA, partition_columns=("kind",), tight_bounds=True))
    assert found == {
        "numRecords": 3,
        "minValues": {"id": 1, "amount": -2.0, "name": "a", "at": "2025-01-01T00:00:00.000Z", "day": "2026-01-02"},
        "maxValues": {"id": 3, "amount": 10.5, "name": "b" * 32 + ASCII_MAX, "at": "2026-01-02T03:04:05.678Z",
                      "day": "2026-01-02"},
        "nullCount": {"id": 1, "amount": 1, "name": 1, "at": 1, "day": 2, "flag": 1, "tags": 1},
        "tightBounds": True,
    }
    # a decimal as Jackson writes a BigDecimal: its scale kept
    assert '"amount":-2.00' in dw.stats(rows, SCHEMA, partition_columns=("kind",))


def test_statistics_cover_the_first_32_leaf_columns_only():
    schema = {"type": "struct", "fields": [{"name": f"c{i}", "type": "integer"} for i in range(40)]}
    rows = pa.table({f"c{i}": pa.array([i], pa.int32()) for i in range(40)})
    found = json.loads(dw.stats(rows, schema))
    assert list(found["minValues"]) == [f"c{i}" for i in range(32)] and len(found["nullCount"]) == 32


def test_the_writer_s_merge_is_spark_s_merge(spark, tmp_path):
    """A mart-shaped Delta table with deletion vectors, written by Spark in two files, copied; the
    same keys updated by Spark's MERGE on one copy and by the writer on the other: the commits re-add
    the same files with deletion vectors of as many rows, and the tables hold the same rows. The writer's statistics of Spark's own first file equal Spark's."""
    origin, ours = tmp_path / "spark", tmp_path / "writer"
    spark.sql(f"create table delta.`{origin}` (id bigint, amount decimal(12,2), name string, at timestamp, "
              "day date, flag boolean, tags array<string>, props map<string,string>) using delta "
              "tblproperties (delta.enableDeletionVectors = true)")
    spark.sql(f"""insert into delta.`{origin}` select /*+ REPARTITION(2) */ id, cast(id * 1.25 as decimal(12,2)),
        repeat(cast(id as string), 1 + id % 20), timestamp_millis(1700000000000 + id * 1001), date_add('2026-01-01', cast(id as int)),
        id % 2 = 0, array(cast(id as string)), map('k', cast(id as string)) from range(1, 201) as r(id)""")
    shutil.copytree(origin, ours)
    table = dw.DeltaTable(spark, ours)
    first = min(table.files)
    assert json.loads(dw.stats(table.rows(first), table.schema, tight_bounds=True)) == json.loads(
        table.files[first]["stats"])

    keys = [5, 17, 88, 150, 199]
    spark.sql(f"merge into delta.`{origin}` as t using (select /*+ COALESCE(1) */ id, 'changed' as name from delta.`{origin}` "
              f"where id in ({', '.join(map(str, keys))})) as s on t.id = s.id when matched then update set name = s.name")
    matched: dict[str, list[int]] = {}
    for path in sorted(table.files):
        for i, key in enumerate(table.rows(path).column("id").to_pylist()):
            if key in keys:
                matched.setdefault(path, []).append(i)
    old = pa.concat_tables([table.rows(p).take(rows) for p, rows in sorted(matched.items())])
    changed = old.set_column(old.column_names.index("name"), "name", pa.array(["changed"] * old.num_rows))
    table.merge(matched, changed, updated=len(keys), inserted=0, source_rows=len(keys))

    def commit(root):
        actions = [json.loads(line) for line in max((root / "_delta_log").glob("*.json")).read_text().splitlines()]
        # the files re-added with a deletion vector (the new files' count is Spark's plan's: a write
        # task per target file scanned, where the aging phase's marts give one)
        adds = sorted(a["add"]["deletionVector"]["cardinality"] for a in actions if "add" in a
                      and a["add"].get("deletionVector"))
        removes = sorted(a["remove"]["path"] for a in actions if "remove" in a)
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        metrics = {k: info["operationMetrics"][k] for k in (
            "numTargetRowsUpdated", "numTargetDeletionVectorsAdded", "numTargetDeletionVectorsRemoved", "numOutputRows")}
        return info["operation"], adds, removes, metrics

    assert commit(origin) == commit(ours)
    def rows(root):
        return sorted(r[0] for r in spark.sql(f"select to_json(struct(*)) from delta.`{root}`").collect())

    assert len(rows(ours)) == 200 and rows(ours) == rows(origin)
    assert sum('"name":"changed"' in r for r in rows(ours)) == len(keys)
