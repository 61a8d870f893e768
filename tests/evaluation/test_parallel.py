"""xsim and two-file retrieval: a hand hub case where margin beats cosine, file errors."""

import math

import numpy as np
import pytest

from vmsst.encoding import protocol
from vmsst.evaluation import parallel


def _unit(degrees):
  return (math.cos(math.radians(degrees)), math.sin(math.radians(degrees)))


# Sources at 30°, 0°, -30°; targets at 70°, 0°, -70°: y1 (0°) is a hub, nearer
# by cosine to x0 and x2 than their own partners y0 and y2.
SOURCE = np.array([_unit(30), _unit(0), _unit(-30)], np.float32)
TARGET = np.array([_unit(70), _unit(0), _unit(-70)], np.float32)


def test_margin_undoes_a_hub_that_fools_cosine():
  # k = min(4, 3) = 3, so every neighbourhood holds all three rows.
  # Cosines x->y: x0: y0 cos40 .766, y1 cos30 .866, y2 cos100 -.174;
  #   x1: .342, 1, .342; x2: -.174, .866, .766.
  # Cosine forward: x0->y1, x1->y1, x2->y1: 2 of 3 wrong. Backward: y0->x0 (.766),
  # y1->x1 (1), y2->x2: none wrong.
  # Margin means (all 3 neighbours): x0, x2: (.766 + .866 - .174)/3 = .486; x1: .561;
  #   y0, y2: (.766 + .342 - .174)/3 = .311; y1: (.866 + 1 + .866)/3 = .911.
  # ratio(x0, y1) = .866 / ((.486 + .911)/2) = 1.24 < ratio(x0, y0) = .766 / .399 = 1.92,
  # so x0 -> y0 (x2 alike); x1: 1 / .736 = 1.36 beats .342 / .436 = .78: none wrong.
  errors = parallel.xsim_errors(SOURCE, TARGET)
  assert errors["k"] == 3
  assert errors["forward"] == pytest.approx(200 / 3)
  assert errors["backward"] == 0
  assert errors["forward_margin"] == 0
  assert errors["backward_margin"] == 0


def _write(path, lines):
  path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
  return path


def _encoder():
  table = {f"x{i}": SOURCE[i] for i in range(3)} | {f"y{i}": TARGET[i] for i in range(3)}
  return protocol.UniqueSentences(protocol.PrecomputedEncoder(table), progress=False)


def test_two_files_both_ways(tmp_path):
  src = _write(tmp_path / "a.txt", ["x0", "x1", "x2"])
  trg = _write(tmp_path / "b.txt", ["y0", "y1", "y2"])
  results = parallel.evaluate(_encoder(), src, trg)
  assert results["n"] == 3 and results["k"] == 3
  assert results["src2trg"] == {"accuracy": pytest.approx(100 / 3),
                                "xsim": pytest.approx(200 / 3), "xsim_margin": 0}
  assert results["trg2src"] == {"accuracy": 100, "xsim": 0, "xsim_margin": 0}
  assert "| src2trg | 33.3 | 66.7 | 0.0 |" in parallel.table(results)


def test_bad_files_name_the_files_and_counts(tmp_path):
  src = _write(tmp_path / "a.txt", ["x0", "x1", "x2"])
  with pytest.raises(ValueError, match=r"a\.txt has 3 lines but .*b\.txt has 2"):
    parallel.evaluate(_encoder(), src, _write(tmp_path / "b.txt", ["y0", "y1"]))
  with pytest.raises(ValueError,
                     match=r"empty\.txt: empty \(.*a\.txt has 3 lines, .*empty\.txt has 0\)"):
    parallel.evaluate(_encoder(), src, _write(tmp_path / "empty.txt", []))
  with pytest.raises(FileNotFoundError, match=r"--trg=.*missing\.txt: no such file"):
    parallel.evaluate(_encoder(), src, tmp_path / "missing.txt")
