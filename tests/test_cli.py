"""vmsst.cli: a user error is one `error:` line on stderr and exit 2."""

import pytest

from vmsst import cli


def test_a_user_error_is_one_line_and_exit_2(capsys):
  def main(argv):
    raise cli.UserError(f"--input={argv[1]} does not exist; give a text file.")

  with pytest.raises(SystemExit) as exit_info:
    cli.user_errors(main)(["prog", "x.txt"])
  assert exit_info.value.code == 2
  assert capsys.readouterr().err == "error: --input=x.txt does not exist; give a text file.\n"


def test_other_exceptions_are_bugs_and_keep_their_traceback():
  def main(argv):
    raise KeyError(argv[0])

  with pytest.raises(KeyError):
    cli.user_errors(main)(["prog"])


def test_ctrl_c_outside_training_is_one_line_and_exit_130(capsys):
  def main(argv):
    raise KeyboardInterrupt

  with pytest.raises(SystemExit) as exit_info:
    cli.user_errors(main)(["prog"])
  assert exit_info.value.code == 130
  assert capsys.readouterr().err == "interrupted (Ctrl-C)\n"
