"""Training: the strategies (what each optimizer step sees), their samplers, the fit loop, early stopping and
model selection, checkpoints, and the held-out evaluation against the link heuristics."""
