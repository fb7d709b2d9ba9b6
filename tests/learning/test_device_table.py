"""Per-device tables on disk (learning/device_table.py): a version's rows read back as
written, a sealed version never changes, and a missing file is a clear error."""

from __future__ import annotations

import numpy as np
import pytest

from learning.device_table import MissingTableError, TableStore, tables_of


def _written(store, table, version, values, chunk=3):
    writer = table.next_version(version)
    for lo in range(0, values.shape[0], chunk):
        writer.write(lo, values[lo:lo + chunk])
    return writer.seal()


def test_rows_written_in_a_version_read_back_and_the_previous_version_stays(tmp_path):
    store = TableStore(tmp_path / "tables")
    zeros = store.zeros("c_k", 8, 5)
    assert zeros.path is None and not (tmp_path / "tables").exists()  # version 0: no file
    np.testing.assert_array_equal(zeros.rows(2, 6), np.zeros((4, 5), np.float32))
    rng = np.random.default_rng(0)
    first_values = rng.standard_normal((8, 5)).astype(np.float32)
    first = _written(store, zeros, 1, first_values)
    assert first.path == tmp_path / "tables" / "c_k.v1.f32"
    np.testing.assert_array_equal(first.rows(0, 8), first_values)
    np.testing.assert_array_equal(first.rows(3, 7), first_values[3:7])
    np.testing.assert_array_equal(first.rows_of(np.arange(6, 8)), first_values[6:])
    before = first.path.read_bytes()
    second_values = rng.standard_normal((8, 5)).astype(np.float32)
    second = _written(store, first, 2, second_values)
    np.testing.assert_array_equal(second.rows(0, 8), second_values)
    assert first.path.read_bytes() == before  # the previous version is unchanged
    np.testing.assert_array_equal(first.rows(0, 8), first_values)
    # a checkpoint names the version; the store opens it again
    again = store.open("c_k", second.reference())
    assert again == second
    np.testing.assert_array_equal(again.rows(1, 2), second_values[1:2])


def test_a_version_is_sealed_only_whole_and_an_unfinished_one_is_deleted(tmp_path):
    store = TableStore(tmp_path)
    writer = store.zeros("h_k", 4, 2).next_version(1)
    writer.write(0, np.ones((2, 2)))
    with pytest.raises(ValueError, match="lacks 2 devices' rows"):
        writer.seal()
    assert writer.partial.exists() and not writer.final.exists()
    writer.discard()
    assert store.files() == []
    with pytest.raises(ValueError, match="rows 3:5"):
        store.zeros("h_k", 4, 2).next_version(1).write(3, np.ones((2, 2)))


def test_a_missing_or_short_version_is_an_error_naming_the_file(tmp_path):
    store = TableStore(tmp_path)
    with pytest.raises(MissingTableError, match=r"c_k\.v3\.f32.*missing"):
        store.open("c_k", np.array([3, 8, 5]))
    (tmp_path / "c_k.v3.f32").write_bytes(bytes(12))
    with pytest.raises(MissingTableError, match=r"c_k\.v3\.f32: 12 bytes"):
        store.open("c_k", np.array([3, 8, 5]))
    table = store.zeros("c_k", 8, 5)
    table = _written(store, table, 4, np.ones((8, 5), np.float32))
    table.path.unlink()
    with pytest.raises(MissingTableError, match=r"c_k\.v4\.f32"):
        table.rows(0, 1)


def test_keep_deletes_the_versions_no_state_refers_to(tmp_path):
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class State:
        w: object
        c_k: object

    store = TableStore(tmp_path)
    zero = store.zeros("c_k", 2, 3)
    one = _written(store, zero, 1, np.ones((2, 3), np.float32))
    two = _written(store, one, 2, 2 * np.ones((2, 3), np.float32))
    (tmp_path / "c_k.v3.f32.partial").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("mine")
    assert tables_of(State(w=0, c_k=two)) == {"c_k": two}
    gone = store.keep(State(w=0, c_k=two))
    assert sorted(p.name for p in gone) == ["c_k.v1.f32", "c_k.v3.f32.partial"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c_k.v2.f32", "notes.txt"]
