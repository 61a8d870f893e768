"""Training and its machinery: the loop, train step, checkpoints, optimizers."""
