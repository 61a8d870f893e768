r"""Fills a distillation run's teacher vectors ahead.

  python -m vmsst.teacher_cache --gin_file=gin/runs/distillation_cpu.gin
  python -m vmsst.teacher_cache --gin_file=gin/runs/distillation_paper.gin \
      --gin.TEACHER_MODEL_DIR="'runs/english_teacher'"

Reads the run's gin files and `--gin.X=Y` bindings as `python -m vmsst.train`
does and runs its teacher stage (vmsst.teachers.cache.fill_stage): the source
sentences of the run's distillation tasks and of its held-out MSE sets that
the cache lacks are encoded by the run's teacher, once; one line per cache
says how many were cached and how many encoded. Training then reads the cache
and never loads the teacher (`python -m vmsst.train` runs the same stage
itself when the cache is incomplete, so this step is optional: it moves the
encoding, 6.6 minutes for distillation_cpu.gin on a 2-core machine, out of
the training job, e.g. onto a machine that has the teacher).
"""

from vmsst.base import cli
from vmsst.base import console
from vmsst.base import gin_utils  # pylint: disable=g-bad-import-order
from vmsst.training import configurables

console.quiet_startup()  # before TensorFlow and JAX load
if __name__ == "__main__":  # --help before them too: train's gin flags are all it shows
  gin_utils.define_flags()
  cli.show_in_help(names=gin_utils.FLAG_NAMES)
  cli.answer_help()

# pylint: disable=wrong-import-position
import sys
from typing import Any, Sequence

from absl import flags

from vmsst.base.gin_utils import gin
from vmsst.teachers import cache as teacher_cache
from vmsst.training import preflight
from vmsst.evaluation import in_training

gin_utils.define_flags()


def _resolved(value: Any) -> Any:
  """A bound gin value: `@f` -> f, `@F()` -> a built F, lists element-wise."""
  if isinstance(value, gin.config.ConfigurableReference):
    return value.scoped_configurable_fn() if value.evaluate else value.scoped_configurable_fn
  if isinstance(value, (list, tuple)):
    return [_resolved(v) for v in value]
  return value


def _bound(name: str) -> Any:
  try:
    return _resolved(gin.query_parameter(name))
  except ValueError:  # not bound by this run
    return None


def fill_run(gin_files: Sequence[str], bindings: Sequence[str],
             search_paths: Sequence[str] = (".",)) -> dict[str, teacher_cache.FillReport]:
  """Runs the teacher stage of the run these gin files describe; {cache directory: report}.

  Raises:
    cli.UserError: the run reads no teacher cache (not a distillation run),
      or what configurables.parse_gin / preflight.check_paths reject.
  """
  configurables.parse_gin(gin_files, bindings, search_paths)
  preflight.check_paths()
  evaluators = in_training.as_list(_bound("train.evaluator"))
  if (_bound("distillation_tasks.teacher_cache") is None
      and not any(getattr(e, "teacher_cache", None) is not None for e in evaluators)):
    raise cli.UserError(
        f"{' '.join(gin_files)} reads no teacher cache (neither distillation_tasks.teacher_cache "
        "nor an evaluator with a teacher_cache is bound): nothing to fill; is it a "
        "distillation run?")
  _, reports = teacher_cache.fill_stage(_bound("train.register_tasks"), evaluators)
  return reports


def main(argv: Sequence[str]) -> None:
  del argv
  options = flags.FLAGS
  reports = fill_run(options.gin_file, options.gin_bindings, options.gin_search_path)
  for directory, report in reports.items():  # complete now, whatever was cached before
    print(f"teacher cache {directory}: holds every sentence this run reads; {report.encoded} "
          f"encoded now in {report.seconds:.1f} s")


if __name__ == "__main__":
  cli.run(main, argv=gin_utils.rewrite_gin_args(sys.argv))
