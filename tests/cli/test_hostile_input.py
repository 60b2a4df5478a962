"""Damaged inputs, every command: exit code 1 or 3, one line, no traceback.

Each case copies a committed fixture (or a Keras 3 file written once) to a
fresh directory, damages one file (truncated to half, emptied, deleted,
bytes flipped in the middle, replaced by garbage) and runs the command in
this interpreter; a few cases run through `python -m` to show what a
terminal sees. `convert` must leave nothing at NEW or beside it, `migrate`
must leave what it cannot read untouched.
"""

import os
import random
import re
import shutil
import subprocess
import sys

import pytest

from tests import testing
from tf_mixed_precision_compat.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

# The inputs, as copied under `src/` of each case: name -> (file or
# directory in tests/fixtures, or None for a Keras 3 file written once).
SOURCES = {
    "ckpt": "legacy/ckpt_tf24_func_adam_dynamic",
    "model.h5": "legacy/h5_tf24_seq_adam_exp.h5",
    "weights.h5": "legacy/weights_tf24_func_adam_dynamic.h5",
    "sm": "legacy/sm_tf24_func_adam",
    "m.keras": None,
    "m.weights.h5": None,
}
# Format -> (the file damaged, the path the command is given), under src/.
FORMATS = {
    "ckpt-index": ("ckpt/ckpt-1.index", "ckpt/ckpt-1"),
    "ckpt-data": ("ckpt/ckpt-1.data-00000-of-00001", "ckpt/ckpt-1"),
    "ckpt-state": ("ckpt/checkpoint", "ckpt"),
    "h5-model": ("model.h5", "model.h5"),
    "h5-weights": ("weights.h5", "weights.h5"),
    "sm-pb": ("sm/saved_model.pb", "sm"),
    "sm-vars-index": ("sm/variables/variables.index", "sm"),
    "sm-vars-data": ("sm/variables/variables.data-00000-of-00001", "sm"),
    "keras-archive": ("m.keras", "m.keras"),
    "keras-weights-h5": ("m.weights.h5", "m.weights.h5"),
}


def _read(path):
  with open(path, "rb") as f:
    return f.read()


def _write(path, data):
  with open(path, "wb") as f:
    f.write(data)


def _flip(data):
  """Every bit of 64 bytes in the middle inverted.

  From the first non-zero byte at or after the middle: H5 files keep zeroed
  free space there, which no reader looks at.
  """
  mid = next((i for i in range(len(data) // 2, len(data)) if data[i]),
             len(data) // 2)
  return data[:mid] + bytes(b ^ 0xFF for b in data[mid:mid + 64]) + data[
      mid + 64:]


DAMAGES = {
    "truncated": lambda p: _write(p, _read(p)[:os.path.getsize(p) // 2]),
    "empty": lambda p: _write(p, b""),
    "deleted": os.remove,
    "flipped": lambda p: _write(p, _flip(_read(p))),
    "garbage": lambda p: _write(p, random.Random(str(p)).randbytes(
        max(os.path.getsize(p), 512))),
}
# Whole-directory damages: (format, what is done, the path given).
DIRECTORY_DAMAGES = {
    "sm-no-variables": (lambda src: shutil.rmtree(src / "sm" / "variables"),
                        "sm"),
    "ckpt-state-names-missing-prefix": (
        lambda src: _write(src / "ckpt" / "checkpoint",
                           b'model_checkpoint_path: "ckpt-99"\n'), "ckpt"),
    "ckpt-no-files": (lambda src: [os.remove(p) for p in src.glob(
        "ckpt/ckpt-1.*")], "ckpt"),
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
  """The undamaged inputs, in one directory copied by each case."""
  import keras  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp("pristine")
  for name, fixture in SOURCES.items():
    if fixture is None:
      continue
    source = testing.fixture_path(*fixture.split("/"))
    if os.path.isdir(source):
      shutil.copytree(source, root / name)
    else:
      shutil.copy(source, root / name)
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  model.compile(optimizer=keras.optimizers.LossScaleOptimizer(
      keras.optimizers.Adam()), loss="mse")
  model.optimizer.build(model.trainable_variables)
  model.save(root / "m.keras")
  model.save_weights(root / "m.weights.h5")
  return root


@pytest.fixture
def src(pristine, tmp_path):
  shutil.copytree(pristine, tmp_path / "src")
  return tmp_path / "src"


def _error_lines(err):
  """stderr without the progress lines `convert` and `migrate` write."""
  return [line for line in err.splitlines()
          if line.strip() and not re.match(r"\[\d+/\d+\] |\s", line)]


def _check(code, out, err, named):
  assert "Traceback" not in out + err, err
  assert code in (1, 3), (code, out, err)
  (line,) = _error_lines(err)
  assert line.startswith("error: ") and "a bug in" not in line, err
  assert named in line, (named, err)
  return line


def _inspect(capsys, path, *args):
  code = main(["inspect", str(path), *args])
  captured = capsys.readouterr()
  return code, captured.out, captured.err


@pytest.mark.parametrize("damage", sorted(DAMAGES))
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_inspect_damaged_file(capsys, src, fmt, damage):
  damaged, given = FORMATS[fmt]
  DAMAGES[damage](src / damaged)
  _check(*_inspect(capsys, src / given), str(src / given))


@pytest.mark.parametrize("case", sorted(DIRECTORY_DAMAGES))
def test_inspect_damaged_directory(capsys, src, case):
  damage, given = DIRECTORY_DAMAGES[case]
  damage(src)
  _check(*_inspect(capsys, src / given), str(src / given))


@pytest.mark.parametrize("damage", ["truncated", "flipped", "garbage"])
def test_inspect_dry_run_of_damaged_data(capsys, src, damage):
  # --model reads every value again through the restore pipeline.
  DAMAGES[damage](src / FORMATS["ckpt-data"][0])
  _check(*_inspect(capsys, src / "ckpt" / "ckpt-1", "--model",
                   "tests.cli.models:func_model"), str(src / "ckpt"))


@pytest.mark.parametrize("fmt, damage", [
    ("ckpt-data", "empty"), ("sm-pb", "garbage")])
def test_no_traceback_reaches_the_terminal(src, fmt, damage):
  damaged, given = FORMATS[fmt]
  DAMAGES[damage](src / damaged)
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  result = subprocess.run(
      [sys.executable, "-m", "tf_mixed_precision_compat", "inspect",
       str(src / given)], capture_output=True, text=True, env=env,
      check=False)
  assert result.returncode == 3, result.stderr
  assert result.stdout == "" and "Traceback" not in result.stderr
  # TensorFlow's own start-up lines (C++ logging) may come first.
  lines = result.stderr.strip().splitlines()
  assert [line for line in lines if line.startswith("error: ")] == lines[-1:]
  assert str(src / given) in lines[-1]


def _leftovers(directory):
  return sorted(p.name for p in directory.iterdir())


CONVERT_CASES = {  # id -> (format, damage)
    "index-truncated": ("ckpt-index", "truncated"),
    "index-garbage": ("ckpt-index", "garbage"),
    "data-truncated": ("ckpt-data", "truncated"),
    "data-flipped": ("ckpt-data", "flipped"),
    "data-deleted": ("ckpt-data", "deleted"),
    "state-garbage": ("ckpt-state", "garbage"),
    "h5-garbage": ("h5-model", "garbage"),
}


@pytest.mark.parametrize("case", sorted(CONVERT_CASES))
@pytest.mark.parametrize("new_exists", [False, True], ids=["new", "empty-new"])
def test_convert_damaged_checkpoint_writes_nothing(capsys, src, tmp_path,
                                                   case, new_exists):
  fmt, damage = CONVERT_CASES[case]
  damaged, given = FORMATS[fmt]
  DAMAGES[damage](src / damaged)
  new = tmp_path / "out" / "new"
  new.parent.mkdir()
  if new_exists:
    new.mkdir()
  code = main(["convert", str(src / given), str(new), "--model",
               "tests.cli.models:func_model"])
  captured = capsys.readouterr()
  _check(code, captured.out, captured.err, str(src / given))
  assert _leftovers(new.parent) == (["new"] if new_exists else [])
  assert not new_exists or not os.listdir(new)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_convert_damaged_h5_without_model_names_the_file(capsys, src,
                                                         tmp_path, damage):
  # An H5 file needs no --model: the damage, not the option, is the error.
  damaged, given = FORMATS["h5-model"]
  DAMAGES[damage](src / damaged)
  new = tmp_path / "out" / "new"
  new.parent.mkdir()
  code = main(["convert", str(src / given), str(new)])
  captured = capsys.readouterr()
  assert code == 3
  _check(code, captured.out, captured.err, str(src / given))
  assert _leftovers(new.parent) == []


MIGRATE_CASES = {  # id -> the file's bytes (None: missing, "dir")
    "binary-garbage": random.Random(0).randbytes(2048),
    "invalid-utf8": b"import tensorflow as tf\nname = '\xff\xfe'\n",
    "syntax-error": b"import tensorflow as tf\ndef f(:\n  pass\n",
    "nul-bytes": b"import tensorflow as tf\x00\n",
    "missing": None,
    "directory": "dir",
}


@pytest.mark.parametrize("case", sorted(MIGRATE_CASES))
def test_migrate_leaves_unreadable_sources_untouched(capsys, tmp_path, case):
  content = MIGRATE_CASES[case]
  path = tmp_path / "job.py"
  if content == "dir":
    path.mkdir()
  elif content is not None:
    _write(path, content)
  code = main(["migrate", "--write", str(path)])
  captured = capsys.readouterr()
  line = _check(code, captured.out, captured.err, str(path))
  assert code == 3, line
  if isinstance(content, bytes):
    assert _read(path) == content
  assert _leftovers(tmp_path) == ([] if content is None else ["job.py"])


def test_convert_failing_after_new_is_written_leaves_nothing(capsys,
                                                             tmp_path):
  # The --keras file's directory is missing: its move fails after NEW and
  # the --weights file are in place.
  new, keras_file = tmp_path / "new", tmp_path / "missing" / "m.keras"
  code = main(["convert", testing.fixture_path(
      "legacy", "ckpt_tf23_seq_adam_dynamic"), str(new), "--model",
               "tests.cli.models:seq_model", "--weights",
               str(tmp_path / "w.weights.h5"), "--keras", str(keras_file)])
  captured = capsys.readouterr()
  _check(code, captured.out, captured.err, str(keras_file))
  assert _leftovers(tmp_path) == []
