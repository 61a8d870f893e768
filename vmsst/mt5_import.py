r"""Imports an mT5 checkpoint as a run's initial parameters.

  python -m vmsst.mt5_import --hf_dir=/path/to/mt5-large \
      --gin_file=gin/runs/vmsst_24l_pretrained.gin \
      --output=/path/to/mt5_large_vmsst.safetensors

reads config.json and model.safetensors (or a sharded index) of --hf_dir
without torch, takes the parameter names and shapes of the model that the gin files'
`train.model` names, converts every mT5 tensor that has a counterpart into
our layout, prints a report (mapped / dropped / freshly initialised, with
counts) and writes the converted tensors as one safetensors file of
"/"-joined names. Training starts from it with
`train.init_params = '<output>'`: parameters without a counterpart keep the
run's own seeded initialisation, and the file is read only while MODEL_DIR
has no checkpoint. The file names layers `layer_<i>` whether or not the run
scans its layers (NetworkConfig.scan_layers): under scan `load_params` stacks
them into `<stack>/layers/...`, so one conversion starts either. The network
must *be* an mT5 stack: NetworkConfig's T5 switches on and the sizes of
config.json (`network_config` builds one; gin/models/sizes/mt5_large.gin
binds them for the paper's 24 layers).

The name map and what is dropped or fresh: vmsst/model/mt5_conversion.py.
"""

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import path_checks  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order
from vmsst.base import gin_utils  # pylint: disable=g-bad-import-order
from vmsst.training import configurables

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()

# pylint: disable=wrong-import-position
import sys

from absl import flags

from vmsst.base import files
from vmsst.base.gin_utils import gin
from vmsst.model import mt5_conversion
from vmsst.model import param_files


def _define_flags() -> None:
  gin_utils.define_flags()
  flags.DEFINE_string("hf_dir", None, "Hugging Face T5/mT5 directory (config.json, "
                      "model.safetensors).", required=True)
  flags.DEFINE_string("output", None, "Where the converted parameters (.safetensors) go.",
                      required=True)


def main(argv) -> None:
  cli.check_no_arguments(argv)
  f = flags.FLAGS
  if not f.gin_file:
    raise cli.UserError("give --gin_file=gin/runs/<run>.gin: the run whose model the "
                        "parameters are converted for.")
  if not files.exists(files.join(f.hf_dir, "config.json")):
    raise cli.UserError(f"--hf_dir={f.hf_dir} has no config.json; give a Hugging Face T5/mT5 "
                        "directory (save_pretrained(..., safe_serialization=True) writes one).")
  path_checks.check_output_path("output", f.output)
  # The model only: the run's paths (MODEL_DIR, INIT_PARAMS, ...) may stay unset here.
  configurables.parse_gin(f.gin_file, f.gin_bindings, f.gin_search_path, needs=("train.model",))
  model = gin.query_parameter("train.model").scoped_configurable_fn()
  try:
    checkpoint = mt5_conversion.Checkpoint(f.hf_dir)
  except FileNotFoundError as e:  # no safetensors: the message says how to save them
    raise cli.UserError(str(e)) from e
  converted, report = mt5_conversion.convert(checkpoint, model)
  print(report.summary())
  param_files.save_params(f.output, converted)
  print(f"wrote {f.output}; train from it with --gin.train.init_params=\"'{f.output}'\"")


if __name__ == "__main__":
  _define_flags()
  cli.run(main, argv=gin_utils.rewrite_gin_args(sys.argv))
