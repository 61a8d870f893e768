"""The memory variants of one run as gin bindings: what `vmsst.compile --variants` takes.

Data only (no JAX), so the command checks `--variants` before its imports;
`step.py` applies them after the run's own bindings.
"""

# name -> gin bindings applied after the run's own (variants of one run).
VARIANTS = {
    "none": ["NetworkConfig.remat = 'none'", "NetworkConfig.scan_layers = False"],
    "remat": ["NetworkConfig.remat = 'full'", "NetworkConfig.scan_layers = False"],
    "remat_factorized": ["NetworkConfig.remat = 'full'", "NetworkConfig.scan_layers = False",
                         "NetworkConfig.factorized_output = True"],
    "scan": ["NetworkConfig.remat = 'none'", "NetworkConfig.scan_layers = True"],
    "scan_remat": ["NetworkConfig.remat = 'full'", "NetworkConfig.scan_layers = True"],
}
# The step as written: layers unrolled (a `while` body is counted once) and
# nothing recomputed (model FLOPs, the convention of MFU): the vocabulary head
# as whole logits too, since its tiles are a loop that recomputes each tile's
# logits in the backward (vmsst/model/vocab_tiling.py), the same math.
MODEL_FLOPS_BINDINGS = VARIANTS["none"] + ["NetworkConfig.vocab_tile_tokens = 0"]
