"""The base layer: what every other layer of vmsst, and the data side (vmsst_tasks), shares.

File access for local and bucket paths (`files`), the commands' errors and
flags (`cli`), gin's one home (`gin_utils`), the run directory's layout
(`run_directory`), language codes (`languages`), the shared readers
(`text_files`, `sts_files`, `entity_files`), loading a vocabulary
(`sentencepiece_vocabulary`), counts a builder reports (`tallies`) and the
commands' old names (`old_names`). It imports nothing of vmsst above it.
"""
