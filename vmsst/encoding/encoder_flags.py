"""Which encoder a command uses, and how: the flags evaluate, embed, score, mine and export share.

Exactly one of --model_dir (a `python -m vmsst.train` directory),
--saved_model (a `python -m vmsst.export` SavedModel) or --encoder=usem3 (the
offline reference encoder). The flags that mean one thing in every command
that has them are defined here once: the language that picks a two-tower
model's tower (`define_language`, `define_side_languages`) and --normalize.
Commands call `define()` and the others from their `__main__` only, so
importing any of them defines no flags.
"""


from absl import flags

from vmsst.base import cli
from vmsst.base import files
from vmsst.base import run_directory
from vmsst.encoding import protocol
from vmsst.encoding import saved_model as saved_model_lib
from vmsst.encoding import usem3

FLAGS = flags.FLAGS
_CHOICES = ("model_dir", "saved_model", "encoder")
# The flags defined here belong to the module that asks for them (absl's key
# flags): a command's --help lists them as its own.
flags.disclaim_key_flags()


def define() -> None:
  """--model_dir, --saved_model, --encoder, --batch_size."""
  define_model_dir()
  flags.DEFINE_string("saved_model", None, "SavedModel exported by python -m vmsst.export.")
  flags.DEFINE_enum("encoder", None, ["usem3"], "A reference encoder instead of a model.")
  flags.DEFINE_integer("batch_size", 256, "Sentences per encoder call.", lower_bound=1)
  flags.DEFINE_integer("max_seq_length", None, "--model_dir: pieces per sentence, EOS included, "
                       "longer ones are cut (default: the training length, 32 in gin/runs).",
                       lower_bound=2)
  flags.DEFINE_integer("truncate_dim", None, "Keep the first k dimensions of every embedding "
                       "(a nested size the model was trained with, NestedDims; default: all).",
                       lower_bound=1)
  cli.show_in_help(names=[*_CHOICES, "batch_size", "max_seq_length", "truncate_dim"])


def define_model_dir() -> None:
  """--model_dir alone: for a command that reads a training directory and no other encoder."""
  flags.DEFINE_string("model_dir", None, "Directory written by python -m vmsst.train.")


def define_language(name: str, *, of: str) -> None:
  """--<name>: the language of `of`, which picks a two-tower model's tower (`encode_in`)."""
  flags.DEFINE_string(name, None, f"Language of {of}, e.g. de: a two-tower model embeds it with "
                      "that language's tower (default: tower a, English's); other models "
                      "ignore it.")


def define_side_languages(*, when: str = "") -> None:
  """--src_language and --trg_language: the languages of --src and --trg (`when` they apply)."""
  for side in ("src", "trg"):
    define_language(f"{side}_language", of=f"--{side} ({when})" if when else f"--{side}")


def define_normalize(rows: str) -> None:
  """--normalize: `rows` scaled to unit L2 norm, so a dot product of two is their cosine."""
  flags.DEFINE_bool("normalize", False, f"Scale {rows} to unit L2 norm (a dot product is then "
                    "the cosine).")


def given() -> list[str]:
  """The encoder flags set on the command line, e.g. ["--encoder"]."""
  return [f"--{name}" for name in _CHOICES if FLAGS[name].value]


def one_choice(*, model_dir: str | None = None, saved_model: str | None = None,
               encoder: str | None = None, prefix: str = "--") -> str:
  """Which of model_dir / saved_model / encoder is given ("model_dir", ...).

  The one place the rule "exactly one encoder" lives: the commands' flags
  and the distillation `Teacher` (prefix "Teacher.", its gin names) both ask here.

  Raises:
    cli.UserError: none or several given, naming the choices with `prefix`.
  """
  chosen = [name for name, value in zip(_CHOICES, (model_dir, saved_model, encoder)) if value]
  if len(chosen) != 1:
    raise cli.UserError(f"give exactly one of {prefix}model_dir, {prefix}saved_model, "
                        f"{prefix}encoder.")
  return chosen[0]


def check_one() -> None:
  """Fails before any input is read unless exactly one encoder flag is given, naming a real model.

  Raises:
    cli.UserError: no or several encoder flags, or a directory that is not
      what the flag needs (checked before the seconds of JAX/TF imports).
  """
  one_choice(model_dir=FLAGS.model_dir, saved_model=FLAGS.saved_model, encoder=FLAGS.encoder)
  check_paths(model_dir=FLAGS.model_dir, saved_model=FLAGS.saved_model)


def check_paths(*, model_dir: str | None = None, saved_model: str | None = None) -> None:
  """--model_dir holds model.json and checkpoints/; --saved_model a saved_model.pb.

  Local and bucket (gs://...) paths alike.

  Raises:
    cli.UserError: naming the flag, what is missing and where such a directory comes from.
  """
  needs = [("--model_dir", model_dir, (run_directory.MODEL_SPEC, run_directory.CHECKPOINTS),
            "a MODEL_DIR written by `python -m vmsst.train`"),
           ("--saved_model", saved_model, ("saved_model.pb",),
            "an --output written by `python -m vmsst.export`")]
  for flag, path, markers, what in needs:
    if not path:
      continue
    if not files.isdir(path):
      raise cli.UserError(f"{flag}={path} is not a directory; give {what}.")
    missing = [f for f in markers if not files.exists(files.join(path, f))
               and not (f == run_directory.MODEL_SPEC and files.exists(run_directory.of(path).config))]
    # An earlier vmsst's MODEL_DIR (config.gin only) goes on to restore's one error, naming its fix.
    if missing:
      raise cli.UserError(f"{flag}={path} has no {' or '.join(missing)}; give {what}.")


def make_encoder(*, model_dir: str | None = None, saved_model: str | None = None,
                 encoder: str | None = None, batch_size: int = 256,
                 max_seq_length: int | None = None) -> protocol.Encoder:
  """The one encoder named (JAX is imported only for --model_dir)."""
  one_choice(model_dir=model_dir, saved_model=saved_model, encoder=encoder)
  check_paths(model_dir=model_dir, saved_model=saved_model)
  if max_seq_length and not model_dir:
    raise cli.UserError("--max_seq_length applies to --model_dir only (a SavedModel keeps its "
                        "export's length); drop it.")
  if model_dir:
    from vmsst.encoding import checkpoint  # pylint: disable=import-outside-toplevel
    try:
      return checkpoint.CheckpointEncoder.from_model_dir(model_dir, batch_size=batch_size,
                                                         max_seq_length=max_seq_length)
    except ValueError as e:  # a length the model's positions do not cover
      raise cli.UserError(str(e)) from e
  if saved_model:
    return saved_model_lib.SavedModelEncoder(saved_model)
  return usem3.Usem3Encoder()


def from_flags() -> protocol.Encoder:
  """The encoder the parsed flags name (cut to --truncate_dim when given)."""
  encoder = make_encoder(model_dir=FLAGS.model_dir, saved_model=FLAGS.saved_model,
                         encoder=FLAGS.encoder, batch_size=FLAGS.batch_size,
                         max_seq_length=FLAGS.max_seq_length)
  if FLAGS.truncate_dim is None:
    return encoder
  from vmsst.encoding import nested  # pylint: disable=import-outside-toplevel
  return nested.TruncatedEncoder(encoder, FLAGS.truncate_dim)


def unique_from_flags() -> protocol.UniqueSentences:
  """The encoder the parsed flags name, each distinct sentence once, longest first, in
  --batch_size calls: what embed, score and mine encode with."""
  return protocol.UniqueSentences(from_flags(), batch_size=FLAGS.batch_size)
