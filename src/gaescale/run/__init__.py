"""A run from end to end: the pipeline behind ``gaescale train``, the memory planner, the run directory (written
and read back), the commands on a finished run (topk, score, report) and the hyper-parameter search."""
