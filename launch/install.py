"""Installs the project into a virtual environment: `python3 launch/install.py VENV EXTRAS`.

What `make` runs on a fresh clone (`.venv/.installed`). uv resolves, unpacks and byte-compiles
on every core, where pip does it on one: the install takes about half pip's time
(docs/results/tests/). uv reads none of pip's settings, so the ones that decide what installs
(pip.conf and `PIP_*` variables: indexes, find-links, constraints, the CA bundle) are handed to
it; if uv fails for any reason, pip installs as before. Standard library only: it runs before
the venv exists.
"""

import ast
import os
import subprocess
import sys

UV = "uv==0.13.9"
# Apache Beam goes in without its declared requirements (setup.py's "cache" extra says why).
BEAM = "apache-beam==2.77.0"
# pip's setting (the part of a `pip config list` key after its last dot) -> uv's flag.
LIST_SETTINGS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url",
                 "find-links": "--find-links", "constraint": "--constraint"}


def pip_settings(config_list: str) -> dict[str, list[str]]:
  """pip's effective settings for `pip install` from `pip config list` output.

  Each line is `section.key='value'` (a Python literal), the files already merged; the
  `PIP_*` variables (section `:env:`) win over the `[install]` section, which wins over
  `[global]`, as in pip. A value holding several entries (spaces or lines between them)
  is split.
  """
  rank = {":env:": 0, "install": 1, "global": 2}
  chosen = {}
  for line in config_list.splitlines():
    key, sep, value = line.partition("=")
    section, _, name = key.rpartition(".")
    if sep and section in rank and rank[section] <= chosen.get(name, (3,))[0]:
      chosen[name] = (rank[section], ast.literal_eval(value).split())
  return {name: values for name, (_, values) in chosen.items()}


def uv_arguments(settings: dict[str, list[str]]) -> list[str]:
  """uv's flags for pip's list settings, pip's candidate choice (the best version over every
  index, not the first index that has the package) and byte-compiled modules (this
  machine sets PYTHONDONTWRITEBYTECODE, so nothing compiles them later)."""
  flags = ["--index-strategy", "unsafe-best-match", "--compile-bytecode", "--quiet"]
  for setting, flag in LIST_SETTINGS.items():
    for value in settings.get(setting, []):
      flags += [flag, value]
  return flags


def _run(command: list[str], env=None) -> bool:
  return subprocess.run(command, env=env, check=False).returncode == 0


def install_with_uv(venv: str, extras: str, settings: dict[str, list[str]]) -> bool:
  python, env = os.path.join(venv, "bin", "python"), dict(os.environ)
  if settings.get("cert"):
    env.setdefault("SSL_CERT_FILE", settings["cert"][0])
  uv = [os.path.join(venv, "bin", "uv"), "pip", "install", "--python", python,
        *uv_arguments(settings)]
  return (_run([python, "-m", "pip", "install", "--quiet", UV])
          and _run(uv + ["-e", f".[{extras}]"], env) and _run(uv + ["--no-deps", BEAM], env))


def install_with_pip(venv: str, extras: str) -> None:
  pip = [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--quiet"]
  for arguments in (["--upgrade", "pip"], ["-e", f".[{extras}]"], ["--no-deps", BEAM]):
    subprocess.run(pip + arguments, check=True)


def main(argv: list[str]) -> None:
  if len(argv) != 3:
    sys.exit("usage: python3 launch/install.py VENV EXTRAS  (e.g. .venv test,tpu,cache)")
  venv, extras = argv[1:]
  if not os.path.exists(os.path.join(venv, "bin", "python")):
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
  listed = subprocess.run([os.path.join(venv, "bin", "python"), "-m", "pip", "config", "list"],
                          capture_output=True, text=True, check=False).stdout
  if not install_with_uv(venv, extras, pip_settings(listed)):
    print("install.py: uv did not install the project; installing with pip", file=sys.stderr)
    install_with_pip(venv, extras)


if __name__ == "__main__":
  main(sys.argv)
