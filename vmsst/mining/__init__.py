"""Bitext and hard-negative mining over sentence embeddings.

  bitext.py          neighbourhoods both ways, margin scores (Artetxe & Schwenk
                     2019), candidates, one-to-one pairs, `mine`
  neighbors.py       exact k-NN in bounded memory (blockwise JAX over the local
                     devices, or faiss), ties to the lower index
  exact_scores.py    the float64 re-score that makes a neighbour list independent
                     of how it was searched
  twin_rows.py       rows holding the same vector, joined so the lowest rows win
  approximate.py     corpus-scale approximate k-NN (faiss IVF-Flat / SQ8 / PQ),
                     key shards merged exactly, recall measured on a sample
  quantized.py       the search over int8 / binary codes, rescored in float
  beam_pipeline.py   the same mining as an Apache Beam pipeline, past one machine
                     (its settings and files: beam_layout.py; its search
                     stages: beam_search.py)
  negative_selection.py
                     hard negatives for training pairs from their neighbours
  hard_negative_rows.py
                     `python -m vmsst.hard_negatives`'s library: a corpus's
                     pairs read, each language pair's negatives mined
  file_mining.py     `python -m vmsst.mine`'s library: two text files (and their
                     .npy embeddings) mined into a TSV of scored pairs
"""
