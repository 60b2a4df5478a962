"""Records a TF 2.3/2.4 `tf.compat.v1` job that increments `global_step` itself.

Run under the reference environments (Python 3.8):

    .ref/tf24/bin/python tools/gen_v1_global_step_job.py
    .ref/tf23/bin/python tools/gen_v1_global_step_job.py

and writes tests/fixtures/v1_optimizer/global_step_job_tf2X.json; with
`--tf1` it first calls `tf.compat.v1.disable_v2_behavior()`, as TF1-style
scripts did (reference variables, control flow v1), and writes
global_step_job_tf2X_tf1.json. The test
(tests/optimizers/test_compat_v1_global_step_job.py) imports `run_job` from
this file
and runs the same job with this package's optimizer and with TF 2.21's own
`tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer`.

The job is the pattern of real TF 2.3 training scripts: an AdamW-like
subclass of `tf.compat.v1.train.AdamOptimizer` (decoupled weight decay scaled
by the learning rate), wrapped in
`tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer` with a
dynamic loss scale; a warm-up learning rate computed from `global_step`
outside the optimizer; `apply_gradients` built under
`tf.control_dependencies([global_step.assign_add(1)])`, so the job's read of
the step and its increment are not ordered by the job. Variants add a sparse
(embedding) gradient, a variable without a gradient, global-norm clipping,
`global_step` also passed to `apply_gradients`, the learning rate built
before the loss, and a callable learning rate (read inside the optimizer's
apply). One scripted step overflows (skipped, scale halves).

The session runs with one inter-op and one intra-op thread: with more, the
order of ops a graph leaves unordered is decided by thread timing and TF
2.4.4's own result changes from run to run on this job.

Keep this file Python 3.8 compatible.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

OUT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
    "fixtures", "v1_optimizer")

# The loss is multiplied by this per step; inf overflows the step.
STEP_FACTORS = [1.0, 1.0, float("inf"), 1.0, 1.0]
VARIANTS = ("plain", "sparse", "none", "clip", "gs", "lrfirst",
            "lrfirst,sparse,none", "clip,gs,sparse", "lrcall", "lrcall,gs")


class AdamWLike(tf.compat.v1.train.AdamOptimizer):
  """Adam with decoupled weight decay scaled by the learning rate."""

  def __init__(self, weight_decay, learning_rate):
    super().__init__(learning_rate)
    self._weight_decay = weight_decay

  def _decay(self, var):
    lr = tf.convert_to_tensor(self._call_if_callable(self._lr))
    return var.assign_sub(self._weight_decay * lr * var,
                          use_locking=self._use_locking)

  def _resource_apply_dense(self, grad, var):
    with tf.control_dependencies([self._decay(var)]):
      return super()._resource_apply_dense(grad, var)

  def _resource_apply_sparse(self, grad, var, indices):
    with tf.control_dependencies([self._decay(var)]):
      return super()._resource_apply_sparse(grad, var, indices)


def _warmup_lr(global_step):
  return 0.1 * tf.minimum(tf.cast(global_step, tf.float32) / 4.0, 1.0)


def _build(make_optimizer, flags):
  """The job's graph; returns (train_op, factor placeholder, fetches)."""
  global_step = tf.compat.v1.train.get_or_create_global_step()
  w = tf.compat.v1.get_variable(
      "w", initializer=np.array([1.0, -2.0, 0.5], np.float32))
  b = tf.compat.v1.get_variable("b", initializer=np.float32(0.3))
  emb = tf.compat.v1.get_variable(
      "emb", initializer=np.array([[1.0, 0.5], [0.2, -0.3], [0.7, 0.1]],
                                  np.float32))
  unused = tf.compat.v1.get_variable("unused", initializer=np.float32(2.0))
  factor = tf.compat.v1.placeholder(tf.float32, [])
  if "lrfirst" in flags:
    lr = _warmup_lr(global_step)
  x = tf.constant([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
  loss = tf.reduce_sum(tf.square(tf.linalg.matvec(x, w) + b - 1.0))
  var_list = [w, b]
  if "sparse" in flags:
    loss += tf.reduce_sum(tf.nn.embedding_lookup(emb, [0, 2]) ** 2)
    var_list.append(emb)
  if "none" in flags:
    var_list.append(unused)
  loss *= factor
  if "lrfirst" not in flags:
    lr = _warmup_lr(global_step)
  if "lrcall" in flags:
    # Read when the optimizer prepares its apply, under the job's control
    # dependencies.
    lr = lambda: _warmup_lr(global_step)
  opt = make_optimizer(AdamWLike(0.01, lr))
  grads_and_vars = opt.compute_gradients(loss, var_list)
  if "clip" in flags:
    present = [(g, v) for g, v in grads_and_vars if g is not None]
    clipped, _ = tf.clip_by_global_norm([g for g, _ in present], 1.0)
    grads_and_vars = list(zip(clipped, [v for _, v in present]))
  with tf.control_dependencies([global_step.assign_add(1)]):
    train_op = opt.apply_gradients(
        grads_and_vars, global_step=global_step if "gs" in flags else None)
  return train_op, factor, [w, b, emb, global_step]


def run_job(make_optimizer, variant, threads=1):
  """Runs the job's steps; returns the variables after each step.

  Args:
    make_optimizer: Wraps the AdamW-like optimizer in a loss-scale optimizer.
    variant: One of `VARIANTS` (comma-separated flags, or "plain").
    threads: The session's inter-op (and intra-op) threads; 0 is TF's
      default (one per core).

  Returns:
    A list, per step, of `[w, b, emb, global_step]` as Python lists/numbers.
  """
  flags = set(variant.split(","))
  # Per-session threads: otherwise every session shares the process's
  # inter-op pool, sized by whichever session came first.
  config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=threads,
                                    intra_op_parallelism_threads=threads,
                                    use_per_session_threads=True)
  with tf.Graph().as_default():
    train_op, factor, fetches = _build(make_optimizer, flags)
    with tf.compat.v1.Session(config=config) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      steps = []
      for value in STEP_FACTORS:
        sess.run(train_op, {factor: value})
        steps.append([np.asarray(v).tolist() for v in sess.run(fetches)])
  return steps


def _tf_optimizer(inner):
  return tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer(
      inner, "dynamic")


def main():
  tf1 = "--tf1" in sys.argv[1:]
  if tf1:
    tf.compat.v1.disable_v2_behavior()
  version = ".".join(tf.__version__.split(".")[:2])
  record = {"tensorflow": tf.__version__, "step_factors": STEP_FACTORS,
            "tf1_behavior": tf1,
            "variants": {v: run_job(_tf_optimizer, v) for v in VARIANTS}}
  name = "global_step_job_tf%s%s.json" % (version.replace(".", ""),
                                          "_tf1" if tf1 else "")
  os.makedirs(OUT, exist_ok=True)
  with open(os.path.join(OUT, name), "w") as f:
    json.dump(record, f, indent=1)
  print("wrote", name, file=sys.stderr)


if __name__ == "__main__":
  main()
