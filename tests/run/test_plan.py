"""The memory planner: its byte counts against the arrays the code allocates, and its choice."""
import dataclasses

import numpy as np
import pytest

import gaescale
from conftest import random_edges
from gaescale.cli import main
from gaescale.data.synthetic import community_graph
from gaescale.graph import Graph
from gaescale.run.plan import AUTO_ORDER, METIS_PER_ENTRY, RANKING_PER_NODE, _graph, _operator, choose, plan


def _nbytes(*arrays):
    return sum(a.nbytes if isinstance(a, np.ndarray) else a.numel() * a.element_size() for a in arrays)


def test_counted_bytes_match_the_graph_and_its_operators():
    n, e = 500, 3000
    g = Graph.from_edge_index(random_edges(n, e, seed=0), n)
    _ = g.degree
    assert _graph(n, e) == _nbytes(g.indptr, g.indices, g.degree)
    op = g.gcn_operator.csr
    assert _operator(n, e, sage=False) == _nbytes(op.crow_indices(), op.col_indices(), op.values())
    m = g.mean_operator
    assert _operator(n, e, sage=True) == sum(_nbytes(c.crow_indices(), c.col_indices(), c.values())
                                             for c in (m.csr, m.csr_t))


FEATURED = [s for s in AUTO_ORDER if s != "partitioned"]  # partitioned is planned for featureless graphs only


def test_predictions_grow_with_the_graph_and_the_dense_matrix_is_never_chosen():
    config = gaescale.TrainConfig(hidden="16,16", dim=8)
    small = {p.strategy: p for p in plan(config, 100_000, 600_000, 8)}
    large = {p.strategy: p for p in plan(config, 1_000_000, 6_000_000, 8)}
    assert list(small) == FEATURED
    assert [p.strategy for p in plan(config, 100_000, 600_000, None)] == list(AUTO_ORDER)
    for s in FEATURED:
        assert large[s].peak_bytes > small[s].peak_bytes and large[s].sparse_madds > small[s].sparse_madds
    # Cluster-GCN's training holds one batch's activations: less than full batch, which holds the whole graph's
    training = {s: p.resident_bytes + p.step_bytes for s, p in large.items()}
    assert training["cluster"] < training["fastgae"] < training["full"]
    # but METIS runs first, on the whole graph's CSR (2E entries), and can be the larger phase
    assert large["cluster"].setup_bytes == int(METIS_PER_ENTRY * 2 * 6_000_000)
    assert large["cluster"].peak_bytes == large["cluster"].resident_bytes + max(large["cluster"].step_bytes,
                                                                                large["cluster"].setup_bytes)
    assert all(large[s].setup_bytes == 0 for s in ("full", "fastgae", "neighbor"))


def test_choice_under_a_budget():
    config = gaescale.TrainConfig(hidden="128,128", dim=64)  # wide: Cluster-GCN fits where FastGAE does not
    plans = plan(config, 1_000_000, 6_000_000, 8)
    by = {p.strategy: p for p in plans}
    assert choose(plans, 10**12).strategy == "full"
    assert choose(plans, by["full"].peak_bytes - 1).strategy == "fastgae"
    assert choose(plans, by["fastgae"].peak_bytes - 1).strategy == "cluster"
    with pytest.raises(gaescale.ParameterError, match="The 'memory_budget' parameter of train must be at least"):
        choose(plans, by["cluster"].peak_bytes - 1)
    # neighbour sampling needs a sampled dense term: with dense='exact' auto never picks it
    only_neighbor = [by["neighbor"]]
    assert choose(only_neighbor, 10**12, config).strategy == "neighbor"
    with pytest.raises(gaescale.ParameterError, match="The 'dense' parameter of train must be 'sampled'"):
        choose(only_neighbor, 10**12, dataclasses.replace(config, dense="exact"))


def test_auto_trains_with_the_planned_strategy(tmp_path):
    data = community_graph(3000, 15000, seed=1)
    config = gaescale.TrainConfig(hidden="16", dim=8, quiet=True, report=False, epochs=3, strategy="auto",
                                  cluster_parts=12, clusters_per_batch=3)
    by = {p.strategy: p for p in plan(config, 3000, 15000, 8)}
    assert by["cluster"].peak_bytes < min(by["full"].peak_bytes, by["fastgae"].peak_bytes)
    budget = (by["cluster"].peak_bytes + 1) / 2**30  # too small for full batch and FastGAE
    r = gaescale.train(dataclasses.replace(config, memory_budget=budget), data=data)
    assert r.metrics["strategy"] == "cluster"
    assert all(h["steps"] == 4 for h in r.metrics["history"])  # 12 parts, 3 per step
    r = gaescale.train(config, data=data)  # the machine's available memory: full batch fits
    assert r.metrics["strategy"] == "full"


def test_plan_command_prints_every_strategy(tmp_path, capsys):
    (tmp_path / "e.txt").write_text("".join(f"{i} {(i + 1) % 50}\n" for i in range(50)))
    assert main(["plan", str(tmp_path / "e.txt"), "--hidden", "16", "--dim", "8", "--memory-budget", "64"]) == 0
    out = capsys.readouterr().out
    assert "50 nodes, 50 edges, no features" in out
    for s in AUTO_ORDER:
        assert f"| {s} |" in out
    assert "dense N x N matrix" in out and "--strategy auto would train with: full" in out


def test_a_prepared_graph_is_planned_without_its_file_backed_arrays(tmp_path, capsys):
    config = gaescale.TrainConfig(hidden="16,16", dim=8)
    n, e = 1_000_000, 6_000_000
    memory = {p.strategy: p for p in plan(config, n, e, 8)}
    mapped = {p.strategy: p for p in plan(config, n, e, 8, prepared=True)}
    # no edge list (16 B/edge), no kept CSR (8 B/node + 8 B/edge), the training edges stay on disk (16 B/edge)
    et = 0.85 * e
    expected = 16 * e + 8 * n + 8 * e + 16 * et + 8 * et  # _graph(n, et) counts 8 B/edge of int32 columns
    assert memory["full"].resident_bytes - mapped["full"].resident_bytes == pytest.approx(expected, rel=1e-6)
    # the mini-batch strategies evaluate layer by layer instead of building the whole graph's operator
    for s in ("cluster", "neighbor"):
        assert mapped[s].step_bytes < memory[s].step_bytes
    assert mapped["full"].step_bytes == memory["full"].step_bytes
    data = community_graph(3000, 15000, seed=1)
    np.save(tmp_path / "e.npy", data.edge_index)
    np.save(tmp_path / "x.npy", data.x)
    assert main(["prepare", str(tmp_path / "e.npy"), "--features", str(tmp_path / "x.npy"),
                 "--out", str(tmp_path / "g")]) == 0
    capsys.readouterr()
    assert main(["plan", str(tmp_path / "g"), "--hidden", "16,16", "--dim", "8"]) == 0
    assert "3,000 nodes, 15,000 edges, 8 features" in capsys.readouterr().out


def test_the_per_node_biases_and_the_filtered_ranking_are_counted():
    """The bias decoder's (N,) biases, their gradient and Adam's two moments are resident (16 B/node); over a
    prepared graph, evaluation counts the filtered ranking's order of the nodes (RANKING_PER_NODE) once the
    (mapped) embeddings are written."""
    n, e = 100_000_000, 1_000_000_000
    by = {d: {p.strategy: p for p in plan(gaescale.TrainConfig(hidden="16,16", dim=8, decoder=d), n, e, 8,
                                          prepared=True)} for d in ("bias", "inner")}
    for s in FEATURED:
        assert by["bias"][s].resident_bytes - by["inner"][s].resident_bytes == pytest.approx(16 * n, rel=1e-9)
    # at 100M nodes every (N, width) array of layer-wise inference is mapped: evaluation's own peak is the ranking's
    assert by["inner"]["neighbor"].step_bytes >= RANKING_PER_NODE * n


def test_a_held_out_sets_auc_is_counted():
    """HELDOUT_PER_EDGE is what scoring a held-out set and its AUC/AP allocate per edge (numpy's allocations,
    traced), beyond the fixed size of the curve's chunks; evaluation counts it for the larger held-out set."""
    import tracemalloc

    import torch

    from gaescale.run.plan import HELDOUT_PER_EDGE
    from gaescale.training.evaluate import auc_ap, pair_scores
    p, rng = 100_000, np.random.default_rng(0)
    z = torch.randn(5000, 8)
    pos, neg = rng.integers(0, 5000, (2, p)), rng.integers(0, 5000, (2, p))
    tracemalloc.start()
    auc_ap(pair_scores(z, pos), pair_scores(z, neg), chunk=1 << 10)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert 0.9 * HELDOUT_PER_EDGE * p < peak <= HELDOUT_PER_EDGE * p + 2**20
    # a graph whose held-out sets outweigh its nodes' arrays: evaluation grows with the larger set
    n, e = 10_000, 20_000_000
    peaks = [{q.strategy: q for q in plan(gaescale.TrainConfig(hidden="16,16", dim=8, val_fraction=0.05,
                                                               test_fraction=t), n, e, 8, prepared=True)}
             for t in (0.1, 0.2)]
    grown = HELDOUT_PER_EDGE * e * 0.1  # the test set's AUC, on top of what the larger split holds
    assert peaks[1]["neighbor"].peak_bytes - peaks[0]["neighbor"].peak_bytes >= grown


def test_the_budget_is_shared_by_the_processes_of_a_host():
    from gaescale.config import TrainConfig
    from gaescale.run.plan import available_memory, budget_bytes
    config = TrainConfig(strategy="auto")
    one, two = budget_bytes(config, environ={}), budget_bytes(config, environ={"LOCAL_WORLD_SIZE": "2"})
    assert abs(two - one / 2) < 0.05 * available_memory()  # MemAvailable moves a little between the reads
    assert budget_bytes(TrainConfig(strategy="auto", memory_budget=1.5),
                        environ={"LOCAL_WORLD_SIZE": "4"}) == 1.5 * 2**30


def _fake_gpu(monkeypatch, free: int):
    """A machine with one CUDA device of ``free`` bytes free (and far more host memory than that)."""
    import torch

    from gaescale.run import plan as plan_module
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 80 * 2**30))
    monkeypatch.setattr(plan_module, "available_memory", lambda: 2**40)


@pytest.mark.parametrize("device", ["cuda", "auto"])
def test_plan_caps_the_budget_at_the_devices_memory_as_strategy_auto_does(monkeypatch, capsys, device):
    import torch

    from gaescale.run.strategy import choose_strategy
    n, e, f = 1_000_000, 6_000_000, 8
    config = gaescale.TrainConfig(hidden="128,128", dim=64, strategy="auto", device=device)
    by = {p.strategy: p for p in plan(config, n, e, f)}
    free = by["fastgae"].peak_bytes - 1  # the host's memory fits full batch, the GPU's only Cluster-GCN
    _fake_gpu(monkeypatch, free)
    auto, _ = choose_strategy(config, n, e, f, lambda m: None, device=torch.device("cuda", 0))
    assert auto == "cluster"
    assert main(["plan", "--num-nodes", str(n), "--num-edges", str(e), "--num-features", str(f), "--hidden", "128,128",
                 "--dim", "64", "--device", device]) == 0
    out = capsys.readouterr().out
    assert f"budget {free / 2**30:.2f} GiB (at most cuda:0's free memory)" in out
    assert f"--strategy auto would train with: {auto}" in out
    # --device cpu, or a budget given, plans without the GPU, as train does
    assert main(["plan", "--num-nodes", str(n), "--num-edges", str(e), "--num-features", str(f), "--hidden", "16,16",
                 "--dim", "8", "--device", "cpu"]) == 0
    assert "would train with: full" in capsys.readouterr().out
    assert choose_strategy(config, n, e, f, lambda m: None, device=torch.device("cpu"))[0] == "full"


def test_plan_on_cuda_without_a_gpu_is_refused_before_any_work(capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main(["plan", "--num-nodes", "100", "--num-edges", "300", "--device", "cuda"]) == 2
    assert capsys.readouterr().err.startswith("gaescale: error: The 'device' parameter of plan must be 'cpu' or 'auto'")


def test_auto_does_not_choose_cluster_without_pymetis(monkeypatch):
    import gaescale.run.plan as planner
    plans = plan(gaescale.TrainConfig(hidden="128,128", dim=64), 1_000_000, 6_000_000, 8)
    by = {p.strategy: p for p in plans}
    budget = by["fastgae"].peak_bytes - 1  # cluster is the first that fits
    assert by["cluster"].peak_bytes <= budget < by["neighbor"].peak_bytes
    assert choose(plans, budget).strategy == "cluster"
    monkeypatch.setattr(planner, "available", lambda name: name != "pymetis")
    with pytest.raises(gaescale.ParameterError, match=r"'cluster' would fit but needs pymetis \(pip install "
                                                      r"'gaescale\[cluster\]'\)"):
        choose(plans, budget)
    assert choose(plans, 10**12).strategy == "full"  # the others as before


def test_a_featureless_table_larger_than_memory_is_planned_on_disk_in_partitions():
    # without the structural part (40 bytes more an edge of a bucket, here every edge of its nodes: no sample)
    config = gaescale.TrainConfig(hidden="16,16", dim=8, strategy="auto", batch_size=4096, fanouts="5,5,5",
                                  structure="off")
    n = 100_000_000
    plans = plan(config, n, 1_000_000_000, None, prepared=True)
    by = {p.strategy: p for p in plans}
    table = 16 * n * 16  # weight, gradient and Adam's two moments, float32, N x 16
    assert all(p.table_bytes == table for p in plans if p.strategy != "partitioned")
    assert by["partitioned"].table_bytes == 0  # a file's pages: only the per-node biases' state stays resident
    assert by["neighbor"].resident_bytes - by["partitioned"].resident_bytes == table
    assert "48 partitions, 1,176 buckets" in by["partitioned"].note  # one per 2,097,152 nodes
    budget = 22 * 2**30
    assert by["partitioned"].peak_bytes <= budget < min(p.peak_bytes for p in plans if p.strategy != "partitioned")
    assert choose(plans, budget, config).strategy == "partitioned"
    # a configuration the table on disk cannot train with: the refusal says why, and what else would do
    fp16 = dataclasses.replace(config, precision="fp16")
    why = (r"its learnt input table .* 23\.84 GiB\) is held in memory; --strategy partitioned would keep it on disk "
           r"but needs precision 'fp32' or 'bf16'")
    with pytest.raises(gaescale.ParameterError, match=why):
        choose(plans, budget, fp16)
    with_features = plan(config, n, 1_000_000_000, 8, prepared=True)
    assert all(p.table_bytes == 0 for p in with_features) and "partitioned" not in {p.strategy for p in with_features}
    fits = {p.strategy: p for p in with_features}["neighbor"].peak_bytes
    assert choose(with_features, fits, config).strategy == "neighbor"
    with pytest.raises(gaescale.ParameterError, match="the smallest predicted peak"):  # not the table's message
        choose(with_features, fits - 1, config)


def test_neighbour_sampling_counts_the_structural_parts_two_hop_pairs():
    """A step with the structural part draws as many two-hop pairs as edges: a third more pairs scored, and their
    endpoints seed the computation graph (what a step of NeighborLinks holds)."""
    def neighbor(**options):
        config = gaescale.TrainConfig(hidden="16,16", dim=8, strategy="neighbor", fanouts="5,5,5", **options)
        return next(p for p in plan(config, 100_000_000, 1_000_000_000, 8) if p.strategy == "neighbor")
    off, on = neighbor(structure="off"), neighbor(structure="on")
    assert on.pair_evals == pytest.approx(1.5 * off.pair_evals)
    reach = lambda p: int(p.note.split("~")[1].split()[0].replace(",", ""))  # noqa: E731 (its computation graph)
    assert reach(on) > 1.3 * reach(off)
    assert neighbor(structure="off", decoder="hadamard", dense="sampled").pair_evals == off.pair_evals


@pytest.mark.parametrize("hard", [0.0, 0.7])
@pytest.mark.parametrize("ratio", [1.0, 0.25])
def test_counted_bytes_match_the_structural_parts_pool_in_full_batch(hard, ratio):
    """What full batch keeps for the structural part: the two-hop pool (``ratio`` pairs a training edge where the
    graph has more two-hop paths), its non-edges where hard negatives weigh, and phi of the training edges; each
    tensor counted by the whole storage it keeps alive (a view of a larger array keeps all of it)."""
    import torch

    from gaescale.run.plan import _two_hop
    from gaescale.sparse import PairIndex
    from gaescale.structure import TwoHop
    n, e = 2000, 12000
    g = Graph.from_edge_index(random_edges(n, e, seed=1), n)
    pool_size = round(ratio * g.num_edges)
    two_hop = TwoHop(g, pool_size=pool_size, weight=hard, seed=0)
    phi = two_hop.phi_of(PairIndex.from_pairs(torch.from_numpy(g.edge_index()), n))
    pool, neg = two_hop.pool, two_hop.negatives
    kept = [two_hop.pool_phi, two_hop.pool_weight, phi]
    if hard:
        kept += [two_hop.negatives_phi]
    else:
        assert neg is None and two_hop.negatives_phi is None
    held = sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in kept}.values())
    held += pool.nbytes + (neg.nbytes if hard else 0)
    config = gaescale.TrainConfig(pool_ratio=ratio, hard_negatives=hard)
    counted = _two_hop(config, n + 1, g.num_edges)
    assert pool.num_pairs == pool_size and 0.95 * counted <= held <= counted




class _Spread:
    """A graph in a random node order: a bucket's subgraph holds about ``4 / P^2`` of the edges."""

    @staticmethod
    def largest_share(parts: int) -> float:
        return min(1.0, 4 / parts ** 2)


def test_the_table_takes_the_fewest_partitions_whose_step_fits_the_budget():
    config = gaescale.TrainConfig(encoder="linear", dim=16, strategy="partitioned", structure="off")
    n, e, budget = 100_000_000, 1_000_000_000, 22 * 2**30

    def planned(config=config, **kwargs):
        return {p.strategy: p for p in plan(config, n, e, None, prepared=True, **kwargs)}["partitioned"]

    chosen = planned(budget=budget, sample=_Spread())
    assert chosen.peak_bytes <= budget and 2 < chosen.table_parts < 48
    assert f"{chosen.table_parts} partitions" in chosen.note and "the fewest that fit the budget" in chosen.note
    fewer = planned(dataclasses.replace(config, table_parts=chosen.table_parts - 1), budget=budget, sample=_Spread())
    assert fewer.peak_bytes > budget and fewer.table_parts == chosen.table_parts - 1  # --table-parts is kept
    assert fewer.steps == (chosen.table_parts - 1) * chosen.table_parts // 2
    # without a sample, a bucket may hold every edge of its nodes: more partitions for the same budget
    assert chosen.table_parts < planned(budget=budget).table_parts < 48
    assert planned().table_parts == 48  # no budget: one partition per 2,097,152 nodes
    assert planned(budget=2**30).table_parts == 48  # none fits: the default, which the budget's refusal names
    # the structural part's pair features and draws (40 bytes an edge of a bucket): more partitions for the budget
    on = planned(dataclasses.replace(config, structure="on"), budget=budget, sample=_Spread())
    assert on.peak_bytes <= budget and on.table_parts > chosen.table_parts


def test_the_structural_parts_pair_features_are_counted_where_partitions_keep_them(monkeypatch):
    """Where every bucket's edges' pair features are kept across epochs (PartitionBuckets.keeps_phi), the plan counts
    their 12 bytes an edge and a self pair for the whole of training."""
    from gaescale.training.buckets import PartitionBuckets
    config = gaescale.TrainConfig(encoder="linear", dim=16, strategy="partitioned", table_parts=4)
    n, e = 1_000_000, 5_000_000

    def peak(keeps):
        monkeypatch.setattr(PartitionBuckets, "keeps_phi", staticmethod(lambda num_nodes, slots: keeps))
        plans = plan(config, n, e, None, prepared=True, sample=_Spread())
        return {p.strategy: p for p in plans}["partitioned"].peak_bytes

    et = e * (1 - config.val_fraction - config.test_fraction)
    assert peak(True) - peak(False) == pytest.approx(12 * (et + n), abs=2)
    monkeypatch.undo()
    assert PartitionBuckets.keeps_phi(n, 2 * e) and not PartitionBuckets.keeps_phi(100_000_000, 2 * 10**9)


def test_counted_bytes_match_the_shifted_uniform_draws_arrays():
    """Full batch keeps its uniform pairs' arrays (:class:`gaescale.shifts.ShiftedPairs`) across epochs: counted
    exactly, a pair count with and without a window."""
    import torch

    from gaescale.run.plan import _shifted
    from gaescale.shifts import ShiftedPairs
    for n, m in [(1000, 5000), (1000, 5321), (1000, 300)]:
        draws = ShiftedPairs()
        draws.draw(n, m, torch.Generator().manual_seed(0))
        assert draws.nbytes == _shifted(n, m)
