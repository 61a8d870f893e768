r"""Exports: SavedModel, sentence-transformers, huggingface.

  python -m vmsst.export --model_dir=runs/vmsst_cpu --output=runs/vmsst_cpu/export \
      [--step=N] [--normalize] [--platforms=cpu] [--dtype=bfloat16]
  python -m vmsst.export --format=sentence-transformers --model_dir=DIR --output=OUT

--format=sentence-transformers writes a directory that SentenceTransformer(OUT),
mteb and transformers' AutoModel (with the card's pooling) load with no custom
code; --format=huggingface the same directory, its model card leading with the
plain transformers code: vmsst/export_formats/huggingface.py. The SavedModel (the
default) and its contract: vmsst/export_formats/saved_model.py.
"""

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order
from vmsst.export_formats import export_flags

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()
  export_flags.define()
  cli.check_early(export_flags.check)

# pylint: disable=wrong-import-position
import time
from typing import Sequence

from absl import flags

from vmsst.export_formats import saved_model


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  f = flags.FLAGS
  export_flags.check()  # again: a directory may have changed during the imports
  start = time.time()
  if f.format != "savedmodel":
    from vmsst.export_formats import huggingface as hf_export  # pylint: disable=import-outside-toplevel
    try:
      metadata = hf_export.export(f.model_dir, f.output, fmt=f.format, step=f.step)
    except hf_export.Unsupported as e:
      raise cli.UserError(f"--format={f.format}: {e}") from e
    print(f"wrote {f.output}: {metadata['architecture']}, step {metadata['step']}, "
          f"d={metadata['dimension']}, towers {sorted(metadata['towers'])}, "
          f"{time.time() - start:.0f} s")
    return
  metadata = saved_model.export(f.model_dir, f.output, step=f.step, normalize=f.normalize,
                                platforms=f.platforms, dtype=f.dtype,
                                calibration=f.calibration)
  print(f"wrote {f.output}: step {metadata['step']}, d={metadata['dimension']}, "
        f"normalized={metadata['normalized']}, {time.time() - start:.0f} s")


if __name__ == "__main__":
  cli.run(main)
