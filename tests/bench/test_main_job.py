"""bench/main_job.py: the main job's figures come from one recorded run, rendered."""

import importlib.util
import json
import pathlib

from clu import metric_writers

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("main_job", ROOT / "bench" / "main_job.py")
main_job = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(main_job)


def test_the_results_page_is_exactly_what_the_committed_record_renders():
  """Editing the figures by hand, or the record without --render, fails here."""
  record = json.loads((main_job.RECORD_DIR / "main_job.json").read_text())
  assert (main_job.RECORD_DIR / main_job.PAGE).read_text() == main_job.page(
      record, main_job.read_runs())
  assert (main_job.RECORD_DIR / "learning_curve.png").stat().st_size > 0


def _trained_and_evaluated(model_dir: pathlib.Path) -> None:
  """What a main job leaves: the training loop's retrieval events and evaluate's results.json."""
  writer = metric_writers.create_default_writer(str(model_dir / "tensorboard"))
  writer.write_scalars(1, {"loss": 9.0})
  for step, mean in ((80, 1.5), (160, 2.25)):
    writer.write_scalars(step, {"retrieval/mean": mean, "retrieval/chance": 0.45,
                                "retrieval/ntrex_val.eng-jpn": mean / 3,
                                "retrieval/ntrex_val.eng-spa": mean * 3})
  writer.close()
  (model_dir / "eval").mkdir()
  (model_dir / "eval" / "results.json").write_text(json.dumps({
      "_score": {"score": 8.46, "components": {"english_sts": 18.54, "bucc": None},
                 "stand_ins": {"xl_sts": "STSb-multi-mt"}, "apart": {"question_retrieval": 4.04}},
      "_meta": {"seconds": {"stsb": 20.0, "tatoeba": 41.6},
                "truncated": {"stsb": {"truncated": 3, "sentences": 1200, "max_seq_length": 32},
                              "tatoeba": {"truncated": 0, "sentences": 9, "max_seq_length": 32}}},
  }))


def test_collect_reads_the_last_evaluation_the_score_and_what_was_cut(tmp_path):
  _trained_and_evaluated(tmp_path)
  got = main_job.collect(tmp_path)
  assert (got["steps"], got["retrieval_mean"], got["retrieval_chance"]) == (160, 2.25, 0.45)
  assert got["retrieval_curve"] == [[80, 1.5], [160, 2.25]]
  assert got["retrieval_by_set"] == {"ntrex_val.eng-jpn": 0.75, "ntrex_val.eng-spa": 6.75}
  assert (got["score"], got["score_components"]) == (8.5, {"english_sts": 18.5, "bucc": None})
  assert (got["score_definition"], got["score_stand_ins"], got["score_apart"]) == (
      "paper", ["xl_sts"], {"question_retrieval": 4.0})
  assert got["evaluation_seconds"] == 62


def test_render_gives_the_records_figures_and_write_page_writes_only_its_folder(tmp_path):
  _trained_and_evaluated(tmp_path)
  record = {"date_utc": "2026-11-25 00:24", "commit": "abc1234", "fresh_clone": True, "cores": 2,
            "command": "make train", "install_seconds": 83.0, "job_seconds": 431.0,
            "load_average": {"mean": 2.2, "max": 3.7}, **main_job.collect(tmp_path)}
  text = main_job.render(record)
  for figure in ("2026-11-25 00:24", "abc1234", "8 min 34 s", "2.25%", "0.45%",
                 "ntrex_val.eng-jpn 0.75%", "**8.5**", "english_sts 18.5", "bucc",
                 "question_retrieval 4.0", "stsb 3 of 1,200"):
    assert figure in text, figure
  assert "tatoeba" not in text.split("cut")[-1]  # nothing of it was cut
  folder = tmp_path / "record"
  folder.mkdir()
  path = main_job.write_page(record, folder)
  assert path == folder / "README.md" and path.read_text() == main_job.page(record)
  assert [p.name for p in folder.iterdir()] == ["README.md"]


def test_a_record_of_the_five_family_score_is_named_so_not_as_the_papers():
  """Records measured before the paper's Score keep their figure, under its own name."""
  record = {"score": 11.7, "score_components": {"english_sts": 24.7, "question_retrieval": 17.2}}
  line = main_job.score_line(record)
  assert "five-family" in line and "**11.7**" in line
  assert "english_sts 24.7" in line and "question_retrieval 17.2" in line
  assert "§6.2" not in line


def test_the_runs_headline_is_mean_and_spread_and_every_run_is_listed(tmp_path):
  assert main_job.spread([10.9]) == "10.90% (one run)"
  assert main_job.spread([10.9, 12.5]) == "11.7% ± 1.1 (sample s.d.; 10.9–12.5%, 2 runs)"
  _trained_and_evaluated(tmp_path)
  base = {"commit": "abc1234", "fresh_clone": True, "cores": 2, "command": "make train",
          "install_seconds": 83.0, "job_seconds": 431.0, "load_average": {"mean": 2.2, "max": 3.7},
          **main_job.collect(tmp_path)}
  runs = [dict(base, name="seed0", seed=0, date_utc="2026-11-25 00:24",
               load_before=[1.0, 1.0, 1.0], load_after=[3.0, 2.0, 1.0]),
          dict(base, name="seed1", seed=1, date_utc="2026-11-25 01:24", retrieval_mean=3.25),
          dict(base, name="earlier", seed=0, date_utc="2026-11-24 01:24", retrieval_mean=9.0,
               commit="0ld0000")]
  text = main_job.render_runs(sorted(runs, key=lambda r: r["date_utc"]))
  # The spread is over the seeds of one commit; another commit's run is listed, not in it.
  assert "commit abc1234 (seeds 0, 1): **2.8% ± 0.7 (sample s.d.; 2.2–3.2%, 2 runs)**" in text
  assert "The 1 run(s) of other commits are listed, not in the spread" in text
  assert "[seed0](runs/seed0.json)" in text and "[seed1](runs/seed1.json)" in text
  assert "[earlier](runs/earlier.json)" in text
  assert "1.0 → 3.0 (2.2, 3.7)" in text and "1 min 23 s + 7 min 11 s" in text
