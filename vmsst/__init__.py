"""vmsst: multilingual sentence embeddings (VMSST and baselines) in JAX/Flax."""
