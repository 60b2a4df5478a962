"""Proves checkpoints written by this package restore in real TF 2.3.4.

Run from the project root with the project's environment:

    .venv/bin/python tools/verify_ours_in_tf23.py

It writes, with our `DynamicLossScale`, an eager and a graph-mode
`tf.train.Checkpoint` to tests/fixtures/loss_scale/ours_written/, then runs
itself under the TF 2.3.4 reference interpreter (.ref/tf23/bin/python) to
restore both into TF 2.3.4's own `DynamicLossScale` and records what TF 2.3.4
read in ours_written/tf23_restored.json. The test suite checks that our
current code still writes checkpoints identical to the verified ones.
"""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "loss_scale", "ours_written")
TF23_PYTHON = os.path.join(ROOT, ".ref", "tf23", "bin", "python")

# (name, initial scale, period, updates as gradient values) -> expected state.
CASES = {
    "eager": (256., 3, [1., float("inf"), 1., 1.]),
    "graph": (2.**20, 2, [1., 1., float("nan"), 1.]),
}


def write_ours():
  """Writes the checkpoints with this package; returns expected values."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_mixed_precision_compat as mp  # pylint: disable=g-import-not-at-top
  expected = {}
  for name, (initial, period, updates) in CASES.items():
    prefix = os.path.join(OUT, name, "ckpt")
    if name == "graph":
      with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        ls = mp.DynamicLossScale(initial_loss_scale=initial,
                                 increment_period=period)
        g = tf.compat.v1.placeholder(tf.float32, [])
        update_op, _ = ls.update([g])
        sess.run(tf.compat.v1.global_variables_initializer())
        for value in updates:
          sess.run(update_op, {g: value})
        tf.compat.v1.train.Checkpoint(loss_scale=ls).write(prefix,
                                                           session=sess)
        scale, good = sess.run([ls(), ls._num_good_steps])
    else:
      ls = mp.DynamicLossScale(initial_loss_scale=initial,
                               increment_period=period)
      for value in updates:
        ls.update([tf.constant(value)])
      tf.train.Checkpoint(loss_scale=ls).write(prefix)
      scale, good = ls().numpy(), ls._num_good_steps.numpy()
    expected[name] = {"prefix": os.path.relpath(prefix, OUT),
                      "current_loss_scale": float(scale),
                      "good_steps": int(good),
                      "args": {"initial_loss_scale": initial,
                               "increment_period": period},
                      "updates": [str(u) for u in updates]}
  return expected


def restore_in_tf23():
  """Runs under TF 2.3.4: restores each checkpoint, prints what it read."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  assert tf.__version__ == "2.3.4", tf.__version__
  results = {"tf_version": tf.__version__}
  for name in CASES:
    ls = tf.mixed_precision.experimental.DynamicLossScale()
    tf.train.Checkpoint(loss_scale=ls).read(
        os.path.join(OUT, name, "ckpt")).assert_consumed()
    results[name] = {"current_loss_scale": float(ls().numpy()),
                     "good_steps": int(ls._num_good_steps.numpy())}
  print(json.dumps(results))


def main():
  if sys.argv[1:] == ["--restore-in-tf23"]:
    restore_in_tf23()
    return
  expected = write_ours()
  out = subprocess.run([TF23_PYTHON, __file__, "--restore-in-tf23"],
                       check=True, capture_output=True, text=True,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")).stdout
  restored = json.loads(out.strip().splitlines()[-1])
  for name, values in expected.items():
    for key in ("current_loss_scale", "good_steps"):
      if restored[name][key] != values[key]:
        raise SystemExit(f"{name}: TF 2.3.4 read {restored[name]}, "
                         f"we wrote {values}")
  with open(os.path.join(OUT, "tf23_restored.json"), "w") as f:
    json.dump({"written": expected, "restored_by_tf23": restored}, f,
              indent=1, sort_keys=True)
  print("TF 2.3.4 restored our checkpoints exactly:", restored)


if __name__ == "__main__":
  main()
