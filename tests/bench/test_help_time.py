"""bench/help_time.py's page: a command measured under an old name shares its row with the
command that replaced it, and docs/results/help_time/README.md is what its records render to."""

import importlib.util
import json

import vmsst_testing

_spec = importlib.util.spec_from_file_location("help_time",
                                               vmsst_testing.ROOT / "bench" / "help_time.py")
help_time = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(help_time)

FOLDER = vmsst_testing.ROOT / "docs" / "results" / "help_time"


def _record(label: str, seconds: dict[str, float]) -> dict:
  return {"label": label, "commit": "0000000", "cores": 2, "date_utc": "2026-01-01 00:00",
          "load_before": [1.0], "load_after": [1.0],
          "commands": {c: {"seconds": s, "peak_mb": 40, "heavy": []} for c, s in seconds.items()}}


def test_a_renamed_command_shares_its_row_and_a_gone_one_is_listed_last():
  before = _record("before", {"vmsst.train.pretokenize": 0.9, "vmsst.model_json": 28.0})
  now = _record("now", {"vmsst.pretokenize": 0.5})
  rows = [line for line in help_time.render([before, now]).splitlines() if line.startswith("| `")]
  assert rows == [
      "| `vmsst.pretokenize` (then `vmsst.train.pretokenize`) | 0.90 | 40 | – "
      "| 0.50 | 40 | – |",
      "| `vmsst.model_json` (an old name now: vmsst/base/old_names.py) | 28.00 | 40 | – "
      "| – | – | – |"]


def test_the_page_is_what_its_records_render_to():
  records = sorted((json.loads(p.read_text()) for p in FOLDER.glob("*.json")),
                   key=lambda r: r["date_utc"])
  assert (FOLDER / "README.md").read_text() == help_time.render(records)
  assert list(records[-1]["commands"]) == help_time.commands()  # measured under today's names
