"""What a comparison trains: the objectives, the ablation variants and the named presets.

Plain data, apart from the training side, so `python -m vmsst.compare` defines
its flags and answers --help from it before TensorFlow loads.
"""

import dataclasses

PAPER_OBJECTIVES = ("vmsst", "bitranslation", "contrastive", "vmsst_contrastive")
# Ablations: name -> (the objective it modifies, the files added after that objective's).
VARIANTS = {"vmsst_no_kl": ("vmsst", ("gin/models/ablations/no_kl.gin",))}
OTHER_OBJECTIVES = ("momentum_contrast", "distillation", "query_tower", "entity_contrastive")
# Every method of the codebase and the Table 4 ablation, in the order of the report's rows
# (query_tower after contrastive: it tunes the comparison's own contrastive checkpoint).
ALL_OBJECTIVES = PAPER_OBJECTIVES + tuple(VARIANTS) + OTHER_OBJECTIVES


@dataclasses.dataclass(frozen=True)
class Preset:
  """A named comparison: what trains, from which run files, under which budget."""
  objectives: tuple[str, ...]
  seeds: tuple[int, ...]
  run_file: str  # gin/runs/<objective><run_file>.gin
  steps: int  # TRAIN_STEPS of every objective: the comparison's budget, not any run file's
  batch_size: int  # BATCH_SIZE of every objective
  output: str
  suite: str
  data_dirs: tuple[str, ...]


PRESETS = {
    # 800 x 32: the budget README Table 1 was measured at (15 runs, 80 core-minutes).
    "cpu": Preset(objectives=PAPER_OBJECTIVES + ("vmsst_no_kl",), seeds=(0, 1, 2),
                  run_file="_cpu", steps=800, batch_size=32,
                  output="runs/compare_cpu", suite="score",
                  data_dirs=("../shared/data", "runs/eval_tasks")),
}
