"""The pod install carries what a gs:// MODEL_DIR needs.

orbax imports google-cloud-storage for a gs:// checkpoint directory (its step names ask the
bucket whether it has a hierarchical namespace); if the install lost it, a pod run would fail
at its first save, a thousand steps in. The install the README and launch/tpu.sh use is
`pip install -e '.[tpu]'`, whose base is setup.py's INSTALL_REQUIRES.
"""

import ast
import importlib.metadata
import os
import shlex
import subprocess

import vmsst_testing

ROOT = vmsst_testing.ROOT


def _install_requires() -> dict[str, str]:
  """setup.py's INSTALL_REQUIRES as {name: pinned version or ''} (read, not executed)."""
  tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
  value = next(node.value for node in tree.body if isinstance(node, ast.Assign)
               and any(getattr(t, "id", "") == "INSTALL_REQUIRES" for t in node.targets))
  pins = {}
  for requirement in ast.literal_eval(value):
    name, _, version = requirement.partition("==")
    pins[name.split("[")[0].strip().lower()] = version.strip()
  return pins


def test_the_base_install_pins_google_cloud_storage_and_it_is_installed():
  pins = _install_requires()
  assert pins.get("google-cloud-storage"), "setup.py INSTALL_REQUIRES lost google-cloud-storage"
  assert importlib.metadata.version("google-cloud-storage") == pins["google-cloud-storage"]
  from google.cloud import storage  # pylint: disable=import-outside-toplevel
  assert storage.Client


def test_orbax_step_names_on_a_bucket_use_the_installed_client(gcs):
  from orbax.checkpoint._src.path import gcs_utils  # pylint: disable=import-outside-toplevel
  gcs_utils.get_bucket.cache_clear()
  assert not gcs_utils.is_hierarchical_namespace_enabled(gcs.path("run"))
  assert gcs_utils.get_bucket(gcs.bucket).name == gcs.bucket


def test_tpu_install_action_installs_the_tpu_extra_on_every_worker():
  done = subprocess.run(["bash", "launch/tpu.sh", "install"], cwd=ROOT, capture_output=True,
                        text=True, timeout=120, check=False,
                        env=dict(os.environ, DRY_RUN="1", TPU_NAME="t", ZONE="z",
                                 ACCELERATOR_TYPE="v4-8"))
  assert done.returncode == 0, done.stderr
  (line,) = [shlex.split(line) for line in done.stdout.splitlines() if line.strip()]
  assert line[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "t"] and "--worker=all" in line
  command = next(w for w in line if w.startswith("--command="))[len("--command="):]
  assert shlex.split(command) == ["cd", "vmsst", "&&", "python3", "-m", "pip", "install", "-e",
                                  ".[tpu]"]
