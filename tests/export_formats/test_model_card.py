"""vmsst/export_formats/model_card.py: the held-out figures and data licenses the export's card reports."""

from clu import metric_writers

from vmsst.export_formats import model_card


def test_heldout_figures_are_the_runs_last_evaluation(tmp_path):
  """Read back from the events the training loop writes (clu's writer under tensorboard/)."""
  writer = metric_writers.create_default_writer(str(tmp_path / "tensorboard"))
  writer.write_scalars(1, {"loss": 9.0})
  for step, value in ((200, 2.5), (400, 4.25)):
    writer.write_scalars(step, {"retrieval/mean": value, "retrieval/ntrex_val.eng-deu": value + 1})
  writer.flush()
  writer.close()
  assert model_card.heldout(str(tmp_path)) == {"mean": 4.25, "ntrex_val.eng-deu": 5.25}


def test_a_run_without_evaluation_has_no_heldout_figures(tmp_path):
  assert not model_card.heldout(str(tmp_path))
