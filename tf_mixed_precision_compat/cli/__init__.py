"""`python -m tf_mixed_precision_compat`: the way off the package.

Three commands take a TF 2.2-2.4 mixed-precision job to native Keras 3:
`inspect` (what a checkpoint, H5 file or SavedModel holds, and whether it
restores into a model), `convert` (a TF 2.x checkpoint rewritten as a native
Keras 3 one) and `migrate` (the job's source rewritten to Keras 3's API).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Optional, Sequence

# Exit codes every command keeps (its --help repeats them).
OK = 0
REFUSED = 1
USAGE = 2
UNREADABLE = 3
EXIT_CODES = ("exit codes: 0 done; 1 refused (does not restore, conversion "
              "refused, or migrate found uses it cannot rewrite); 2 usage "
              "error; 3 input unreadable or missing")


def _inspect_parser(sub: Any) -> None:
  p = sub.add_parser(
      "inspect", epilog=EXIT_CODES,
      help="what a checkpoint, H5 file or SavedModel holds",
      description="Describes a TF 2.2-2.4 checkpoint (prefix or directory "
      "with a `checkpoint` file), H5 file or Keras SavedModel, or a Keras 3 "
      "checkpoint / .keras / .weights.h5: which layout and TF/Keras wrote "
      "it, weights, optimizer (class, hyperparameters, slots, iterations), "
      "loss scale and other entries. Nothing from the file is executed.")
  p.add_argument("path", help="checkpoint prefix or directory, H5 file, "
                 "SavedModel directory, .keras or .weights.h5 file")
  p.add_argument("--model", metavar="MODULE:FUNCTION",
                 help="dry-run the restore into the model FUNCTION builds "
                 "(a fresh, throwaway model): what matches, what not, why; "
                 "exit code 1 if it does not restore")
  _optimizer_args(p)
  p.add_argument("--json", action="store_true", help="machine-readable")


def _optimizer_args(p: argparse.ArgumentParser) -> None:
  p.add_argument("--optimizer", metavar="NAME",
                 help="Keras 3 optimizer class of the inner optimizer (SGD, "
                 "Adam, ...) when the checkpoint does not tell")
  p.add_argument("--optimizer-args", metavar="JSON",
                 help="extra constructor arguments, a JSON object, e.g. "
                 "'{\"nesterov\": true}'")
  p.add_argument("--policy", metavar="NAME",
                 help="global dtype policy set before FUNCTION runs, e.g. "
                 "mixed_float16")


def _convert_parser(sub: Any) -> None:
  p = sub.add_parser(
      "convert", epilog=EXIT_CODES,
      help="write a TF 2.x checkpoint as a native Keras 3 checkpoint",
      description="Restores OLD (a TF 2.2-2.4 checkpoint, or a whole-model "
      "H5 file) through the package into the model MODULE:FUNCTION builds "
      "(an H5 file's own model) and writes NEW, a directory "
      "tf.train.CheckpointManager reads, laid out as "
      "tf.train.Checkpoint(model=model, optimizer=optimizer, <the "
      "checkpoint's other scalars, e.g. step, epoch>) with "
      "keras.optimizers.LossScaleOptimizer around the Keras 3 inner "
      "optimizer (scale, counter and iterations carried over). The model "
      "and optimizer are found wherever the checkpoint keeps them (under "
      "`model`/`optimizer`, a trainer object, dicts and lists, or the root "
      "as model.save_weights wrote it). NEW is read back in a fresh "
      "interpreter without the package; on any difference it is deleted "
      "and the exit code is 1.")
  p.add_argument("old", help="TF 2.2-2.4 checkpoint (a prefix, or a "
                 "directory with a `checkpoint` file: its latest), "
                 "model.save_weights TF-format prefix, or whole-model H5 "
                 "file (model.save('m.h5'))")
  p.add_argument("new", help="output directory (new or empty)")
  p.add_argument("--model", metavar="MODULE:FUNCTION",
                 help="your function building the Keras 3 model (a dotted "
                 "module or a .py path); its module must not import this "
                 "package. Needed for checkpoints; an H5 file's model comes "
                 "from its config")
  _optimizer_args(p)
  p.add_argument("--model-path", metavar="DOTTED",
                 help="where the checkpoint keeps the model, as an object "
                 "path (e.g. trainer.model; `.` for the root) when convert "
                 "cannot tell")
  p.add_argument("--optimizer-path", metavar="DOTTED",
                 help="where it keeps the optimizer (e.g. trainer.optimizer)"
                 " when it holds several")
  p.add_argument("--weights-h5", metavar="FILE.h5",
                 help="the model's weights, for a checkpoint of the "
                 "optimizer alone (tf.train.Checkpoint(optimizer=...)): the "
                 "H5 file the job's model.save_weights wrote")
  p.add_argument("--fixed-loss-scale", type=float, metavar="VALUE",
                 help="the job's fixed loss scale (TF never stored it): "
                 "written as a LossScaleOptimizer that starts there and never "
                 "grows; unlike TF's, it skips a step whose gradients "
                 "overflow and halves (docs/migration.md)")
  p.add_argument("--no-loss-scale", action="store_true",
                 help="the job had no LossScaleOptimizer (bfloat16 or "
                 "float32; the checkpoint cannot tell it from a fixed "
                 "scale): NEW holds the plain Keras 3 optimizer")
  p.add_argument("--growth-steps", type=int, metavar="N",
                 help="dynamic_growth_steps of the written optimizer "
                 "(checkpoints did not store it; default 2000, TF's default,"
                 " or the H5 file's)")
  p.add_argument("--keras", metavar="FILE.keras",
                 help="also save the model (with optimizer) as .keras (an "
                 "H5 file's model: by default NEW/model.keras)")
  p.add_argument("--weights", metavar="FILE.weights.h5",
                 help="also save the model's weights as .weights.h5")


def _migrate_parser(sub: Any) -> None:
  p = sub.add_parser(
      "migrate", epilog=EXIT_CODES,
      help="report (and rewrite) TF 2.3/2.4 mixed-precision API uses",
      description="Lists every TF 2.3/2.4 mixed-precision API use in the "
      "files with its Keras 3 replacement and what changes. --write applies "
      "the rewrites that keep behaviour (formatting and comments kept) and "
      "leaves the others as report entries. Needs libcst (the `migrate` "
      "extra).")
  p.add_argument("files", nargs="+", metavar="PATH",
                 help="Python files, notebooks (.ipynb: code cells "
                 "rewritten, outputs and metadata kept) or directories "
                 "(their .py and .ipynb files, recursively)")
  p.add_argument("--write", action="store_true",
                 help="rewrite the files in place")
  p.add_argument("--outtree", metavar="DIR",
                 help="with one input directory: copy it to DIR (new or "
                 "empty), every other file included, and rewrite the copy; "
                 "the input stays as it is")
  p.add_argument("--report", metavar="FILE",
                 help="also write the full report (every use, its "
                 "replacement and what changes) to FILE")
  p.add_argument("--verbose", action="store_true",
                 help="every use with its replacement and what changes "
                 "(by default: a line per file and the manual ones)")
  p.add_argument("--json", action="store_true", help="machine-readable")
  p.add_argument("--deviate", action="store_true",
                 help="where no Keras 3 code keeps the behaviour, write the "
                 "closest native form anyway: each such line is marked "
                 "`# migrate --deviate: ...` and reported as a deviation "
                 "(without it nothing that changes behaviour is written)")


def parser() -> argparse.ArgumentParser:
  """The command line's parser."""
  p = argparse.ArgumentParser(
      prog="python -m tf_mixed_precision_compat", epilog=EXIT_CODES,
      description=__doc__.split("\n\n")[1].replace("\n", " "))
  sub = p.add_subparsers(dest="command", required=True)
  _inspect_parser(sub)
  _convert_parser(sub)
  _migrate_parser(sub)
  return p


def _dispatch(args: argparse.Namespace) -> int:
  # pylint: disable=g-import-not-at-top
  if args.command == "inspect":
    from tf_mixed_precision_compat.cli import inspect_cmd
    return inspect_cmd.run(args)
  if args.command == "convert":
    from tf_mixed_precision_compat.cli import convert_cmd
    return convert_cmd.run(args)
  from tf_mixed_precision_compat.cli import migrate_cmd
  return migrate_cmd.run(args)


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Runs a command; returns its exit code.

  Args:
    argv: The arguments after the program name (default `sys.argv[1:]`).

  Returns:
    0 done, 1 refused, 2 usage error, 3 unreadable input.

  Example:

  >>> main(["inspect", "/no/such/ckpt"])
  3
  """
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  try:
    args = parser().parse_args(argv)
  except SystemExit as e:  # argparse: --help is 0, bad usage 2.
    return int(e.code or 0)
  # pylint: disable-next=g-import-not-at-top
  from tf_mixed_precision_compat.cli._plan import BuilderFailed, UsageError
  try:
    return _dispatch(args)
  except BuilderFailed as e:
    print(f"refused: {e}", file=sys.stderr)
    return REFUSED
  except UsageError as e:
    print(f"error: {e}", file=sys.stderr)
    return USAGE
  except (OSError, ValueError) as e:
    print(f"error: cannot read input: {e}", file=sys.stderr)
    return UNREADABLE
  except Exception as e:  # pylint: disable=broad-except
    # The last resort: readers translate what damaged input raises, so this
    # is a bug of ours; one line a user can report, not a traceback.
    given = getattr(args, "path", None) or getattr(args, "old", None) or (
        " ".join(getattr(args, "files", None) or []))
    print(f"error: {type(e).__name__} ({' '.join(str(e).split())}) on "
          f"{given}: a bug in tf_mixed_precision_compat, please report it "
          "with this line", file=sys.stderr)
    return UNREADABLE


def console_main() -> None:
  """The `tf-mixed-precision-compat` console script."""
  sys.exit(main())
