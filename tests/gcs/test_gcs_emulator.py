"""The GCS emulator the gs:// tests run on: every client the project uses reaches it.

tf.io.gfile (through the TLS proxy), vmsst.base.files (etils.epath), orbax (tensorstore for arrays,
google-cloud-storage for its step names; its batch requests, which Apache Beam renames with)
against one bucket on 127.0.0.1, and a host other
than Cloud Storage's is refused, so a test can never reach the internet through the proxy.
"""

import urllib.error
import urllib.request
import uuid

import numpy as np
import pytest

from vmsst.base import files


@pytest.fixture(name="root")
def _root(gcs) -> str:
  return gcs.path(f"smoke-{uuid.uuid4().hex[:8]}")


def test_tf_gfile_writes_reads_lists_globs_and_renames_in_the_bucket(gcs, root):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  tf.io.gfile.makedirs(f"{root}/dir")
  with tf.io.gfile.GFile(f"{root}/dir/a.txt", "w") as f:
    f.write("héllo\n")
  # A few MiB: TensorFlow uploads resumably, through the Location the proxy rewrites.
  big = np.random.default_rng(0).bytes(3 << 20)
  with tf.io.gfile.GFile(f"{root}/dir/big.bin", "wb") as f:
    f.write(big)
  with tf.io.gfile.GFile(f"{root}/dir/a.txt") as f:
    assert f.read() == "héllo\n"
  with tf.io.gfile.GFile(f"{root}/dir/big.bin", "rb") as f:
    assert f.read() == big
  assert sorted(tf.io.gfile.listdir(f"{root}/dir")) == ["a.txt", "big.bin"]
  assert tf.io.gfile.glob(f"{root}/dir/*.txt") == [f"{root}/dir/a.txt"]
  tf.io.gfile.rename(f"{root}/dir/a.txt", f"{root}/dir/b.txt")
  assert not tf.io.gfile.exists(f"{root}/dir/a.txt") and tf.io.gfile.exists(f"{root}/dir/b.txt")
  # The emulator itself holds the objects (not some local fallback).
  assert {f"{root[len(f'gs://{gcs.bucket}/'):]}/dir/{n}" for n in ("b.txt", "big.bin")} <= set(
      gcs.objects(root[len(f"gs://{gcs.bucket}/"):]))


def test_vmsst_files_serves_the_bucket(gcs, root):
  del gcs
  files.write_text(files.join(root, "x", "a.txt"), "one\ntwo\n")
  files.save_npy(files.join(root, "x", "v.npy"), np.arange(5, dtype=np.float32))
  assert files.read_text(files.join(root, "x", "a.txt")) == "one\ntwo\n"
  np.testing.assert_array_equal(files.load_npy(files.join(root, "x", "v.npy")), np.arange(5))
  assert files.isdir(files.join(root, "x")) and files.isfile(files.join(root, "x", "a.txt"))
  assert files.listdir(files.join(root, "x")) == ["a.txt", "v.npy"]
  assert files.glob(files.join(root, "x", "*.npy")) == [files.join(root, "x", "v.npy")]
  files.copytree(files.join(root, "x"), files.join(root, "y"))
  files.rename(files.join(root, "y", "a.txt"), files.join(root, "y", "b.txt"))
  assert files.listdir(files.join(root, "y")) == ["b.txt", "v.npy"]
  files.rmtree(files.join(root, "y"))
  assert not files.exists(files.join(root, "y"))
  assert files.abspath(root) == root
  # Compressed files (the corpora's .gz) and a file object used outside `with`.
  with files.open_text(files.join(root, "x", "b.txt.gz"), "w") as f:
    f.write("héllo\n")
  with files.open_text(files.join(root, "x", "b.txt.gz")) as f:
    assert f.read() == "héllo\n"
  opened = files.open(files.join(root, "x", "a.txt"))
  assert opened.read() == "one\ntwo\n"
  opened.close()


def test_orbax_saves_and_restores_a_pytree_in_the_bucket(gcs, root):
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  tree = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(4, np.int32)}
  directory = files.join(root, "checkpoints")
  with ocp.CheckpointManager(directory) as manager:
    manager.save(3, args=ocp.args.StandardSave(tree))
    manager.wait_until_finished()
  with ocp.CheckpointManager(directory) as manager:
    assert manager.all_steps() == [3]
    restored = manager.restore(3, args=ocp.args.StandardRestore(tree))
  for key, value in tree.items():
    np.testing.assert_array_equal(restored[key], value)
  prefix = root[len(f"gs://{gcs.bucket}/"):]
  assert any(name.startswith(f"{prefix}/checkpoints/3/") for name in gcs.objects(prefix))


def test_google_cloud_storage_reaches_the_emulator_batches_included(gcs, root):
  from google.cloud import storage  # pylint: disable=import-outside-toplevel
  client = storage.Client()
  bucket = client.bucket(gcs.bucket)
  prefix = root[len(f"gs://{gcs.bucket}/"):]
  for i in range(3):
    bucket.blob(f"{prefix}/a{i}").upload_from_string(f"text {i}")
  with client.batch():  # what Apache Beam's gcsio renames with: one multipart request
    for i in range(3):
      bucket.copy_blob(bucket.blob(f"{prefix}/a{i}"), bucket, f"{prefix}/b{i}")
  assert sorted(gcs.objects(f"{prefix}/b")) == [f"{prefix}/b{i}" for i in range(3)]
  assert bucket.blob(f"{prefix}/b2").download_as_bytes() == b"text 2"


def test_the_proxy_refuses_every_host_but_cloud_storage(gcs):
  opener = urllib.request.build_opener(urllib.request.ProxyHandler({"https": gcs.proxy_url,
                                                                    "http": gcs.proxy_url}))
  for url in ("https://pypi.org/simple/", "http://example.com/"):
    with pytest.raises((urllib.error.URLError, OSError)):
      opener.open(url, timeout=10)
  assert any("pypi.org" in line for line in gcs.proxy.refused)
  assert any("example.com" in line for line in gcs.proxy.refused)
