"""One PNG per benchmark script from its comparison lines (matplotlib, Agg)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position


def _bars(ax, labels, values, title, unit, targets=None):
  ax.bar(range(len(values)), values, color=["C0" if "ours" in l or "peer" not in l else "C1"
                                            for l in labels])
  ax.set_xticks(range(len(values)), labels, rotation=30, ha="right", fontsize=8)
  ax.set_title(title, fontsize=10)
  ax.set_ylabel(unit)
  for target in targets or []:
    ax.axhline(target, color="k", linestyle="--", linewidth=0.8)


def train_throughput(results, path):
  mfu = [r for r in results if r["name"].endswith("/mfu")]
  fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
  labels = [r["name"].split("/")[1] for r in mfu]
  rates = [r["examples_per_second"] for r in mfu]
  peer_rates = {r["name"].rsplit("_vs_", 1)[1]: r["peer"]
                for r in results if "sentence_transformers" in r["name"]}
  for dtype, rate in sorted(peer_rates.items()):
    labels.append(f"peer: sentence-transformers {dtype}")
    rates.append(rate)
  _bars(left, labels, rates, "training examples/s", "examples/s")
  _bars(right, [r["name"].split("/")[1] for r in mfu], [r["ratio"] for r in mfu],
        "MFU (vs measured matmul peak of its precision)", "fraction", targets=[0.5])
  _save(fig, path, results)


def encode_throughput(results, path):
  by_batch = {r["batch_size"]: r["rates"] for r in results if "rates" in r}
  fig, ax = plt.subplots(figsize=(3 + 2.5 * len(by_batch), 4.5))
  names = {"ours": "ours: Encoder (JAX)", "saved_model": "ours: SavedModel (TF)",
           "peer": "peer: sentence-transformers"}
  labels, values = [], []
  for batch_size, rates in sorted(by_batch.items()):
    for key, rate in rates.items():
      labels.append(f"b{batch_size} {names[key.split('@')[0]]} {key.split('@')[1]}")
      values.append(rate)
  _bars(ax, labels, values, "encoding sentences/s per batch size", "sentences/s")
  _save(fig, path, results)


def mining(results, path):
  fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
  for ax, suffix, unit in ((left, "/time", "seconds"), (right, "/working_memory", "MB")):
    rows = sorted((r for r in results if r["name"].endswith(suffix)), key=lambda r: r["n"])
    n = [r["n"] for r in rows]
    ax.loglog(n, [r["ours"] for r in rows], "o-", label="ours: vmsst.mine (JAX)")
    ax.loglog(n, [r["peer"] for r in rows], "s-", label="peer: faiss IndexFlatIP")
    if suffix.endswith("memory"):
      ax.loglog(n, [r["cosine_matrix_mb"] for r in rows], ":", color="gray",
                label="n x n cosine matrix")
    ax.set_xlabel("sentences per side")
    ax.set_ylabel(unit)
    ax.set_title("mining " + suffix[1:].replace("_", " "), fontsize=10)
    ax.legend(fontsize=8)
  _save(fig, path, results)


def scaling(results, path):
  fig, axes = plt.subplots(1, 3, figsize=(12, 4))
  for ax, kind in zip(axes, ("batch", "length", "mesh")):
    rows = [r for r in results if r["name"].startswith(f"scaling/{kind}/")]
    _bars(ax, [r["name"].split("/")[-1] for r in rows], [r["ratio"] for r in rows],
          f"{kind}: throughput ratio", "large / small" if kind != "mesh" else "2 dev / 1 dev",
          targets=[rows[0]["target"]] if rows else None)
  _save(fig, path, results)


def _save(fig, path, results):
  load = results[0].get("load_average")
  fig.suptitle(f"{results[0].get('date', '')}, load average {load}", fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


PLOTS = {"train_throughput": train_throughput, "encode_throughput": encode_throughput,
         "mining": mining, "scaling": scaling}
