"""A deterministic training run that checkpoints, can die, and resumes.

Run by tests/reliability/test_crash_resume.py. Trains a small Keras model with
our LossScaleOptimizer (Adam inside) for --steps steps, with an overflow (loss
times inf) on --overflow_steps. After every --save_every steps it saves a
`tf.train.CheckpointManager` checkpoint numbered by the optimizer's
`iterations`. On start it resumes from the latest checkpoint in CKPT_DIR, if
any. The data of step i depends on i only, so a resumed run sees what an
uninterrupted one saw.

--die_at STEP:PHASE makes the process SIGKILL itself at that step, where
PHASE is "before_save" (after the step's update, before its checkpoint) or
"after_save". Progress ("<step>\n" after each step) is appended to
CKPT_DIR/progress so the test can also kill it from outside at any moment.

Usage: crash_train.py CKPT_DIR OUTPUT_JSON --steps N [--die_at 5:after_save]
"""

import argparse
import json
import os
import signal
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position


def _hex(value):
  return np.asarray(value).tobytes().hex()


def _die():
  os.kill(os.getpid(), signal.SIGKILL)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("ckpt_dir")
  parser.add_argument("output")
  parser.add_argument("--steps", type=int, required=True)
  parser.add_argument("--save_every", type=int, default=2)
  parser.add_argument("--overflow_steps", default="")
  parser.add_argument("--die_at", default="")
  # Slows steps down so that a kill from outside lands inside the run.
  parser.add_argument("--step_delay", type=float, default=0.)
  args = parser.parse_args()
  overflow = {int(s) for s in args.overflow_steps.split(",") if s}
  die_step, die_phase = (-1, "")
  if args.die_at:
    die_step, die_phase = args.die_at.split(":")
    die_step = int(die_step)

  tf.config.experimental.enable_op_determinism()
  import keras  # pylint: disable=g-import-not-at-top
  import tf_mixed_precision_compat as mp  # pylint: disable=g-import-not-at-top

  keras.utils.set_random_seed(7)
  model = keras.Sequential([
      keras.Input((4,)),
      keras.layers.Dense(8, activation="tanh"),
      keras.layers.Dense(2),
  ])
  opt = mp.LossScaleOptimizer(
      keras.optimizers.Adam(0.01), initial_scale=2.**12,
      dynamic_growth_steps=3)
  opt.build(model.trainable_variables)
  ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
  manager = tf.train.CheckpointManager(ckpt, args.ckpt_dir, max_to_keep=None)
  if manager.latest_checkpoint:
    ckpt.restore(manager.latest_checkpoint).assert_consumed()

  @tf.function
  def train_step(x, y, poison):
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(tf.square(model(x) - y)) * poison
      scaled = opt.get_scaled_loss(loss)
    variables = model.trainable_variables
    grads = opt.get_unscaled_gradients(tape.gradient(scaled, variables))
    opt.apply_gradients(zip(grads, variables))

  progress = open(os.path.join(args.ckpt_dir, "progress"), "a")  # pylint: disable=consider-using-with
  step = int(opt.iterations.numpy())  # Skipped steps count too.
  while step < args.steps:
    rng = np.random.RandomState(1000 + step)
    x = rng.uniform(-1, 1, (8, 4)).astype(np.float32)
    y = rng.uniform(-1, 1, (8, 2)).astype(np.float32)
    poison = np.float32(np.inf if step in overflow else 1.)
    train_step(tf.constant(x), tf.constant(y), tf.constant(poison))
    time.sleep(args.step_delay)
    if step == die_step and die_phase == "before_save":
      _die()
    if (step + 1) % args.save_every == 0:
      manager.save(checkpoint_number=int(opt.iterations.numpy()))
    if step == die_step and die_phase == "after_save":
      _die()
    progress.write(f"{step}\n")
    progress.flush()
    step += 1

  result = {
      "weights": [[v.path, _hex(v.numpy())] for v in model.weights],
      "optimizer": [[v.path, _hex(v.numpy())] for v in opt.variables],
      "iterations": int(opt.iterations.numpy()),
      "scale": _hex(opt.loss_scale.numpy()),
      "counter": int(opt.dynamic_counter.numpy()),
      "finite": all(bool(np.isfinite(v.numpy()).all()) for v in model.weights),
  }
  with open(args.output, "w") as f:
    json.dump(result, f)


if __name__ == "__main__":
  main()
