"""The data as published, read under one bad-input policy: pair readers (NTREX-128, Multi30k,
the Tatoeba filter; `InputPolicy`), OPUS directories and the paper's OPUS inventory, prepared
TFDS datasets, the held-out retrieval sets, the mined-negatives format, and the vocabulary
trained from them. Plain Python where it can be (seqio turns these into tasks in registry/)."""
