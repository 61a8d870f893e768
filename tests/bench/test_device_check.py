"""bench/device_check.py --quick: every part on a CPU, TensorFlow and seqio absent (gin present).

The comparison's data is written here through seqio (the first lines of
NTREX-128 and Multi30k, the session's tiny vocabulary), as `--prepare`
writes the real one; the check itself then runs in processes where
TensorFlow, tensorflow-text and seqio cannot be imported (a sitecustomize on
PYTHONPATH hides them from every child too), as on an accelerator image.
"""

import json
import os
import subprocess
import sys

import pytest

from vmsst.base import files
from vmsst_testing import ROOT, WITHOUT_TENSORFLOW

_HIDE = WITHOUT_TENSORFLOW


@pytest.fixture(scope="module", name="data")
def _data(small_data_dir, tiny_vocab_path, tmp_path_factory):
  sys.path.insert(0, str(ROOT / "bench"))
  from vmsst_tasks.sources import heldout  # pylint: disable=import-outside-toplevel
  from vmsst_tasks import registry  # pylint: disable=import-outside-toplevel
  from vmsst import pretokenize  # pylint: disable=import-outside-toplevel
  import device_parts  # pylint: disable=import-outside-toplevel
  data = tmp_path_factory.mktemp("device_data")
  registry.register_tasks(str(small_data_dir), tiny_vocab_path)
  pretokenize.write_stream("vmsst_ntrex_multi30k", str(data / "stream"), examples=512,
                           sequence_length=device_parts.LENGTH, seed=0)
  sets = heldout.retrieval_sets(str(small_data_dir), max_pairs=24)
  files.write_text(str(data / "heldout.json"),
                   json.dumps({k: list(map(list, v)) for k, v in sets.items()}))
  return data


@pytest.mark.slow
def test_quick_check_runs_every_part_without_tensorflow(data, tmp_path):
  hide = tmp_path / "hide"
  hide.mkdir()
  (hide / "sitecustomize.py").write_text(_HIDE)
  out = tmp_path / "out"
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hide), str(ROOT)])}
  done = subprocess.run([sys.executable, "bench/device_check.py", f"--output={out}", "--quick",
                         f"--data={data}", "--microbatches=2"], cwd=ROOT, capture_output=True,
                        text=True, timeout=700, check=False, env=env)
  assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
  results = json.loads((out / "device_check.json").read_text())
  parts = results["parts"]
  rows = {row["objective"]: row for row in parts["speed"]["rows"]}
  assert sorted(rows) == sorted(["vmsst", "bitranslation", "contrastive", "vmsst_contrastive",
                                 "momentum_contrast"]), parts["speed"]
  for row in rows.values():
    assert row["batch"] == 16 and row["examples_per_s"] > 0, row
    assert 0 < row["mfu"] < 1 and row["model_flops"] > 0 and row["compiled_memory_gib"] > 0
  # VMSST's search started from XLA:CPU's estimate for an 80 GB device (quick: VMSST's alone),
  # its step compiled at two batches; the tiled head, not whole logits.
  estimate = rows["vmsst"]["memory_estimate"]
  assert estimate["probe_batches"] == [8, 16] and estimate["max_batch"] >= 16, estimate
  assert estimate["limit_from"].startswith("an 80 GB") and estimate["per_example_mib"] > 0
  assert rows["vmsst"]["vocab_tile_tokens"] > 0
  # VMSST at the paper's batch (quick: 16) in 2 accumulated microbatches, its MFU from the
  # model's FLOPs of the whole batch (the same count as the one-pass row at that batch).
  paper = parts["speed"]["paper_batch"]
  assert paper["microbatches"] == 2 and paper["batch"] == 16 and paper["examples_per_s"] > 0
  assert paper["model_flops"] == rows["vmsst"]["model_flops"] and 0 < paper["mfu"] < 1, paper
  assert "peak_memory_gib" in paper and paper["compiled_memory_gib"] > 0
  assert "quick mode" in parts["speed"]["peer"]["skipped"]
  slowest = min(rows.values(), key=lambda r: r["examples_per_s"])["objective"]
  profile = parts["profile"]
  assert profile["objective"] == slowest and profile["top_ops"], profile
  assert sum(op["share"] for op in profile["top_ops"]) <= 1 + 1e-9
  runs = parts["comparison"]["runs"]
  assert sorted(runs) == ["bitranslation", "contrastive", "vmsst"], runs
  for run in runs.values():
    assert run["steps"] >= 2 and run["curve"], run  # evaluated at intervals and at the end
    assert 0 <= run["final_retrieval"]["mean"] <= 100
    average = run["xsim"]["average"]
    assert all(0 <= average[k] <= 100 for k in ("forward", "backward"))
  summary = (out / "device_check.md").read_text()
  assert "## Speed" in summary and "## Profile" in summary and "## Comparison" in summary
  assert "2 microbatches of 8" in summary and "Memory estimate" in summary


README = ROOT / "docs/results/device/README.md"
DEVICE_LIMIT_MIB = 64  # what one device call carries: the tree and its carried paths


def _folder_bytes(path) -> int:
  return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_the_device_command_and_what_it_carries_fit_one_call():
  """The page's one-line commands name the check and the carried folder; the tree plus that
  folder (its stated ceiling, and its real size where it was prepared) stay under 64 MiB."""
  text = README.read_text()
  commands = [line.strip() for line in text.splitlines()
              if line.startswith("    python3 -m pip install")
              and "bench/device_check.py --output=$OUT" in line]
  assert len(commands) == 2, commands  # the whole check, and a lease's first call
  for command in commands:
    assert ".device_carry/whl/*.whl" in command and "--data=.device_carry/data" in command
  assert '`carry` = `[".device_carry"]`' in text and "`timeout_s` = 540" in text
  carry_mib = float(text.split("CARRY_MIB = ")[1].split()[0])
  listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                          capture_output=True, check=True).stdout.decode().split("\0")
  tree = sum((ROOT / name).stat().st_size for name in listed if name and (ROOT / name).is_file())
  assert tree / 2**20 + carry_mib < DEVICE_LIMIT_MIB, (tree / 2**20, carry_mib)
  carried = ROOT / ".device_carry"
  if carried.exists():  # prepared in this checkout: its real size is under the stated ceiling
    assert _folder_bytes(carried) / 2**20 <= carry_mib
