"""Several processes under torchrun: the runtime (one process or a process group), what rank 0 sends the others,
and the shards of the graph and features for neighbour sampling."""
