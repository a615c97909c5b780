"""Directed graphs (``--directed``): the graph with its out- and in-CSR and the directed split
(:mod:`.graph`), the source/target encoder, its asymmetric decoder and loss (:mod:`.model`), and the
training run built from them (:mod:`.pipeline`). See docs/directed.md."""
