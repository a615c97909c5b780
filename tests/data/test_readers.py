import gzip

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gaescale.data.features import attach_features
from gaescale.data.readers import read_edges
from gaescale.errors import InputFileError


def _edges_as_id_pairs(el):
    ids = el.node_ids
    return sorted((str(ids[u]), str(ids[v])) for u, v in el.edge_index.T)


def test_csv_with_header_and_string_ids(tmp_path):
    f = tmp_path / "e.csv"
    f.write_text("source,target\nalice,bob\n# a comment\nbob,carol\n\ncarol,alice\n")
    el = read_edges(f)
    assert el.num_nodes == 3
    assert el.node_ids.tolist() == ["alice", "bob", "carol"]  # first appearance: sources, then targets
    assert _edges_as_id_pairs(el) == [("alice", "bob"), ("bob", "carol"), ("carol", "alice")]


def test_whitespace_integer_ids_are_compacted_and_kept(tmp_path):
    f = tmp_path / "e.txt"
    f.write_text("# SNAP style\n10\t  20\n20 30   # inline comment\n 30 1000\n")
    el = read_edges(f)
    assert el.node_ids.tolist() == [10, 20, 30, 1000]
    assert el.edge_index.tolist() == [[0, 1, 2], [1, 2, 3]]


def test_tsv_gzip_and_extra_weight_column(tmp_path):
    f = tmp_path / "e.tsv.gz"
    with gzip.open(f, "wt") as fh:
        fh.write("1\t2\t0.5\n2\t3\t1.5\n")
    el = read_edges(f)
    assert el.node_ids.tolist() == [1, 2, 3] and el.edge_index.shape == (2, 2)


def test_columns_after_the_second_are_ignored_even_when_ragged(tmp_path):
    f = tmp_path / "e.csv"
    f.write_text("1,2\n3,4,5\n6,7\n")
    assert read_edges(f).edge_index.tolist() == [[0, 2, 4], [1, 3, 5]]


def test_ids_str_keeps_numeric_looking_ids_as_strings(tmp_path):
    f = tmp_path / "e.csv"
    f.write_text("007,7\n7,08\n")
    el = read_edges(f, ids="str")
    assert sorted(el.node_ids.tolist()) == ["007", "08", "7"]


def test_npy_both_orientations(tmp_path):
    ei = np.array([[0, 1, 2], [1, 2, 4]])
    np.save(tmp_path / "a.npy", ei)
    np.save(tmp_path / "b.npy", ei.T)
    a, b = read_edges(tmp_path / "a.npy"), read_edges(tmp_path / "b.npy")
    assert np.array_equal(a.edge_index, ei) and np.array_equal(b.edge_index, ei)
    assert a.num_nodes == 5 and a.node_ids is None


def test_npz_with_features_and_isolated_nodes(tmp_path):
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    np.savez(tmp_path / "g.npz", edge_index=np.array([[0, 1], [1, 2]]), x=x, num_nodes=np.int64(6))
    el = read_edges(tmp_path / "g.npz")
    assert el.num_nodes == 6 and np.array_equal(el.x, x)


def test_parquet_string_ids(tmp_path):
    pq.write_table(pa.table({"src": ["a", "b"], "dst": ["b", "c"]}), tmp_path / "e.parquet")
    el = read_edges(tmp_path / "e.parquet")
    assert _edges_as_id_pairs(el) == [("a", "b"), ("b", "c")]


def test_keyed_feature_table_aligns_by_id_and_adds_isolated_nodes(tmp_path):
    e = tmp_path / "e.csv"
    e.write_text("b,a\nc,b\n")
    feats = tmp_path / "f.csv"
    feats.write_text("id,f1,f2\na,1,10\nb,2,20\nc,3,30\nd,4,40\n")
    el = attach_features(read_edges(e), feats)
    assert el.node_ids.tolist() == ["b", "c", "a", "d"]
    assert el.x.tolist() == [[2, 20], [3, 30], [1, 10], [4, 40]]
    assert el.num_nodes == 4


def test_npy_features_with_integer_ids_use_id_as_row(tmp_path):
    e = tmp_path / "e.txt"
    e.write_text("3 1\n1 0\n")
    np.save(tmp_path / "x.npy", np.arange(5, dtype=np.float32)[:, None] * 10)
    el = attach_features(read_edges(e), tmp_path / "x.npy")
    assert el.num_nodes == 5 and el.node_ids.tolist() == [0, 1, 2, 3, 4]
    assert sorted(map(tuple, el.edge_index.T.tolist())) == [(1, 0), (3, 1)]
    assert el.x[:, 0].tolist() == [0, 10, 20, 30, 40]


def test_parquet_features(tmp_path):
    e = tmp_path / "e.csv"
    e.write_text("x,y\n")
    e.write_text("u,v\n5,6\n")
    pq.write_table(pa.table({"node": [6, 5], "f": [0.5, 1.5]}), tmp_path / "f.parquet")
    el = attach_features(read_edges(e), tmp_path / "f.parquet")
    assert el.node_ids.tolist() == [5, 6] and el.x[:, 0].tolist() == [1.5, 0.5]


def test_long_string_id_file_read_in_chunks(tmp_path):
    """pandas parses long files in chunks; ids must map the same across them."""
    n = 300_000
    f = tmp_path / "e.csv"
    f.write_text("".join(f"u{i},u{(i * 7 + 1) % n}\n" for i in range(n)))
    el = read_edges(f)
    assert el.num_nodes == n and el.edge_index.shape == (2, n)
    ids = el.node_ids
    assert ids[el.edge_index[0, 12345]] == "u12345" and ids[el.edge_index[1, 12345]] == f"u{(12345 * 7 + 1) % n}"
    assert ids[el.edge_index[0, -1]] == f"u{n - 1}"


def test_string_id_with_a_tab_is_refused(tmp_path):
    pq.write_table(pa.table({"src": ["a\tb", "c"], "dst": ["c", "d"]}), tmp_path / "e.parquet")
    with pytest.raises(InputFileError, match=r"e.parquet: node id 'a\\tb' contains a tab or line break"):
        read_edges(tmp_path / "e.parquet")


@pytest.mark.parametrize("content,match", [
    ("1,2\n3\n", "line 2: expected at least 2 columns"),
    ("1 2\n2 3\n4 x\n", "line 3, field 'target': expected an integer node id. Got 'x'"),
    ("1 2\n2 3.5\n", "line 2, field 'target': node id 3.5 is not an integer"),
    ("# only a comment\n\n", "no data lines"),
    ("source,target\n", "no edges"),
])
def test_bad_text_edge_lists_name_the_line(tmp_path, content, match):
    f = tmp_path / "bad.csv"
    f.write_text(content)
    with pytest.raises(InputFileError, match=match) as exc:
        read_edges(f)
    assert str(exc.value).startswith(str(f)) and "\n" not in str(exc.value)


# ---------------------------------------------------------------- edge weights (--weighted)

def test_weights_of_text_parquet_and_npz(tmp_path):
    (tmp_path / "e.txt").write_text("a b 0.5\n# c\nb c 2\nc a 1e1 extra\n")
    el = read_edges(tmp_path / "e.txt", weighted=True)
    assert _edges_as_id_pairs(el) == [("a", "b"), ("b", "c"), ("c", "a")]
    assert el.edge_weight.dtype == np.float32 and el.edge_weight.tolist() == [0.5, 2.0, 10.0]
    assert read_edges(tmp_path / "e.txt").edge_weight is None  # without --weighted the column is not read
    (tmp_path / "h.csv").write_text("src,dst,time,w\n1,2,100,0.25\n2,3,101,4\n")
    assert read_edges(tmp_path / "h.csv", weighted=True, weight_column="w").edge_weight.tolist() == [0.25, 4.0]
    assert read_edges(tmp_path / "h.csv", weighted=True).edge_weight.tolist() == [100.0, 101.0]  # the third
    pq.write_table(pa.table({"s": [1, 2], "t": [2, 3], "w": [3, 0.5]}), tmp_path / "e.parquet")
    assert read_edges(tmp_path / "e.parquet", weighted=True).edge_weight.tolist() == [3.0, 0.5]
    np.savez(tmp_path / "e.npz", edge_index=np.array([[0, 1], [1, 2]]), edge_weight=np.array([2, 7]))
    assert read_edges(tmp_path / "e.npz", weighted=True).edge_weight.tolist() == [2.0, 7.0]


@pytest.mark.parametrize("name,text,kwargs,message", [
    ("e.txt", "1 2 0.5\n2 3 x\n", {}, "{f}, line 2, field 'weight': expected an edge weight: a finite number >= 0. "
                                      "Got 'x'."),
    ("e.txt", "1 2 0.5\n\n2 3\n", {}, "{f}, line 3, field 'weight': missing edge weight."),
    ("e.txt", "1 2\n2 3\n", {}, "{f}, line 1, field 'weight': missing edge weight (--weighted reads the third "
                                "column)."),
    ("e.csv", "src,dst,w\n1,2,-1\n", {}, "{f}, line 2, field 'w': expected an edge weight: a finite number >= 0. "
                                         "Got '-1'."),
    ("e.csv", "src,dst,w\n1,2,1\n2,3,inf\n", {}, "{f}, line 3, field 'w': expected an edge weight: a finite number "
                                                 ">= 0. Got 'inf'."),
    ("e.csv", "1,2,nan\n", {}, "{f}, line 1, field 'weight': expected an edge weight: a finite number >= 0. "
                               "Got 'nan'."),
    ("e.csv", "src,dst,w\n1,2,1\n", {"weight_column": "q"}, "{f}, line 1: no column named 'q' (--weight-column). "
                                                            "Got columns ['src', 'dst', 'w']."),
    ("e.csv", "1,2,1\n", {"weight_column": "w"}, "{f}: has no header line, so no column is named 'w' "
                                                 "(--weight-column); add a header, or leave --weight-column out to "
                                                 "read the third column."),
    ("e.npy", None, {}, "{f}: a .npy edge list holds no edge weights (--weighted); use an .npz with 'edge_index' "
                        "and 'edge_weight', or a text or Parquet table with a weight column."),
])
def test_bad_weights_name_file_line_and_field(tmp_path, name, text, kwargs, message):
    f = tmp_path / name
    if text is None:
        np.save(f, np.array([[0, 1], [1, 2]]))
    else:
        f.write_text(text)
    with pytest.raises(InputFileError) as info:
        read_edges(f, weighted=True, **kwargs)
    assert str(info.value) == message.format(f=f)
    if name.endswith(".npy"):
        with pytest.raises(InputFileError, match=r"a \.npy edge list has no named columns \(--weight-column w\)"):
            read_edges(f, weighted=True, weight_column="w")


def test_bad_binary_weights(tmp_path):
    np.savez(tmp_path / "a.npz", edge_index=np.array([[0, 1], [1, 2]]), edge_weight=np.ones(3))
    np.savez(tmp_path / "b.npz", edge_index=np.array([[0, 1], [1, 2]]), edge_weight=np.array([1.0, np.nan]))
    np.savez(tmp_path / "c.npz", edge_index=np.array([[0, 1], [1, 2]]))
    pq.write_table(pa.table({"s": [1, 2], "t": [2, 3], "w": ["1", "heavy"]}), tmp_path / "d.parquet")
    pq.write_table(pa.table({"s": [1, 2], "t": [2, 3], "w": [1.0, None]}), tmp_path / "e.parquet")
    pq.write_table(pa.table({"s": [1, 2], "t": [2, 3]}), tmp_path / "f.parquet")
    expected = {
        "a.npz": "field 'edge_weight': expected 2 numbers, one per edge of 'edge_index'. Got shape (3,), dtype "
                 "float64.",
        "b.npz": "field 'edge_weight': expected an edge weight: a finite number >= 0. Got nan (edge 1).",
        "c.npz": "expected an array named 'edge_weight' (--weighted). Got arrays ['edge_index'].",
        "d.parquet": "field 'w': expected an edge weight: a finite number >= 0. Got 'heavy' in row 1.",
        "e.parquet": "field 'w': missing edge weight in row 1.",
        "f.parquet": "expected a third column of edge weights (--weighted). Got 2 columns: ['s', 't'].",
    }
    for name, tail in expected.items():
        with pytest.raises(InputFileError) as info:
            read_edges(tmp_path / name, weighted=True)
        assert str(info.value).startswith(str(tmp_path / name)) and str(info.value).endswith(tail), str(info.value)


def test_features_keep_the_edge_weights_and_the_source(tmp_path):
    """attach_features (each of its three paths) carries edge_weight, column by column, and the source along."""
    (tmp_path / "e.txt").write_text("3 1 0.5\n1 0 2.0\n")
    np.savez(tmp_path / "e.npz", edge_index=np.array([[3, 1], [1, 0]]), edge_weight=np.array([0.5, 2.0]))
    np.save(tmp_path / "x.npy", np.zeros((5, 2), np.float32))
    (tmp_path / "x.csv").write_text("id,f\n0,1\n1,2\n3,3\n7,4\n")
    for edges, feats in (("e.txt", "x.npy"), ("e.npz", "x.npy"), ("e.txt", "x.csv")):
        el = read_edges(tmp_path / edges, weighted=True)
        got = attach_features(el, tmp_path / feats)
        assert got.source == el.source == str(tmp_path / edges)
        pairs = {(int(got.node_ids[u]) if got.node_ids is not None else int(u),
                  int(got.node_ids[v]) if got.node_ids is not None else int(v)): float(w)
                 for (u, v), w in zip(got.edge_index.T, got.edge_weight)}
        assert pairs == {(3, 1): 0.5, (1, 0): 2.0}, (edges, feats)
