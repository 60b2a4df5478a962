"""Checks that TF 2.3.4 restores a Saver checkpoint our v1 optimizer wrote.

Run with the project environment (it calls the TF 2.3.4 reference environment
itself; CI has no TF 2.3, so this is a tool, not a test):

    .venv/bin/python tools/check_v1_checkpoint_in_tf23.py

It replays the recorded run (tests/fixtures/v1_optimizer/run.json) with
tf_mixed_precision_compat's MixedPrecisionLossScaleOptimizer in a
tf.compat.v1 Session, saves with tf.compat.v1.train.Saver, then has
`.ref/tf23/bin/python tools/gen_tf23_v1_fixtures.py --restore DIR` build the
same graph with TF 2.3.4's own optimizer, restore, and take one more step.
Both the restored values and the values after that step must equal ours
exactly. Exits non-zero on any difference.
"""

import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TF23_PYTHON = os.path.join(REPO, ".ref", "tf23", "bin", "python")
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf

from tests.optimizers import test_compat_v1_optimizer as recorded


def ours(directory):
  """Replays the run, saves, takes one more step; returns both states."""
  with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
    model = recorded.GraphModel()
    sess.run(tf.compat.v1.global_variables_initializer())
    for step in recorded.STEPS:
      sess.run(model.train_op, model.feed(step))
    tf.compat.v1.train.Saver().save(
        sess, os.path.join(directory, "model.ckpt"), write_meta_graph=False)
    saved = model.read(sess)
    sess.run(model.train_op, model.feed(recorded.STEPS[0]))
    stepped = model.read(sess)
  return {"restored": saved, "stepped": stepped}


def main():
  with tempfile.TemporaryDirectory() as directory:
    expected = ours(directory)
    proc = subprocess.run(
        [TF23_PYTHON, os.path.join(REPO, "tools", "gen_tf23_v1_fixtures.py"),
         "--restore", directory],
        capture_output=True, text=True, check=False,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  if proc.returncode:
    print(proc.stderr[-5000:], file=sys.stderr)
    return proc.returncode
  got = json.loads(proc.stdout.strip().splitlines()[-1])
  ok = True
  for phase in ("restored", "stepped"):
    for key, value in expected[phase].items():
      if got[phase][key] != value:
        ok = False
        print(f"MISMATCH {phase} {key}: TF 2.3.4 {got[phase][key]!r}, "
              f"ours {value!r}")
  print("OK: TF 2.3.4 restores our Saver checkpoint exactly and continues "
        "identically." if ok else "FAILED")
  print(json.dumps(got, sort_keys=True))
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
