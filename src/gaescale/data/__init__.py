"""Reading: edge lists (text, .npy/.npz, Parquet) into a CSR graph with the original ids, features, prepared
(memory-mapped) graphs, the synthetic graphs, and the train/validation/test split."""
