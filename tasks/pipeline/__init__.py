"""The host input pipeline: a run's batches from seqio (or its cache) or from a pre-tokenized
stream, this host's share of the global batch, and the stream's position saved with each
checkpoint."""
