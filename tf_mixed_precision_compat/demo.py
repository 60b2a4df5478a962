"""Demo: dynamic loss scaling at work in a float16 training loop.

    python -m tf_mixed_precision_compat.demo

A small regression model computes in float16 with float32 master weights, the
way mixed precision trains. A `DynamicLossScale` (TF 2.3 API) starts low and
grows every few finite steps until the scaled gradients overflow float16; that
step is skipped and the scale halves. The table shows the scale, the counter
and which steps were skipped.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position

import tf_mixed_precision_compat as mp  # pylint: disable=g-import-not-at-top,wrong-import-position


def loss_scale_run(steps=40, initial_loss_scale=2.**10, increment_period=4,
                   seed=0):
  """Trains a float16 linear model with dynamic loss scaling.

  Args:
    steps: Number of training steps.
    initial_loss_scale: The loss scale to start from.
    increment_period: Finite steps between two growths of the scale.
    seed: Seed of the synthetic data.

  Returns:
    A list of dicts, one per step: loss, scale (used for the step), applied,
    and the scale and counter after the update.
  """
  rng = np.random.default_rng(seed)
  x = tf.constant(rng.normal(size=(64, 16)), tf.float16)
  y = tf.constant(rng.normal(size=(64, 1)) * 8., tf.float16)
  w = tf.Variable(tf.zeros((16, 1)), name="w")
  loss_scale = mp.DynamicLossScale(initial_loss_scale=initial_loss_scale,
                                   increment_period=increment_period)
  opt = tf.keras.optimizers.SGD(0.01)

  @tf.function
  def train_step():
    scale = loss_scale()
    with tf.GradientTape() as tape:
      pred = tf.matmul(x, tf.cast(w, tf.float16))
      loss = tf.reduce_mean(tf.cast(tf.square(pred - y), tf.float32))
      scaled_loss = loss * scale
    # The backward pass runs in float16, so once the scale is large enough
    # the scaled gradients overflow: the skipped steps below are real.
    (scaled_grad,) = tape.gradient(scaled_loss, [w])
    grad = scaled_grad / scale
    _, should_apply = loss_scale.update([grad])
    if should_apply:
      opt.apply_gradients([(grad, w)])
    return loss, scale, should_apply

  history = []
  for _ in range(steps):
    loss, scale, applied = train_step()
    history.append({
        "loss": float(loss), "scale": float(scale), "applied": bool(applied),
        "new_scale": float(loss_scale()),
        "good_steps": int(loss_scale._num_good_steps.numpy())})
  return history


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=40)
  args = parser.parse_args(argv)
  history = loss_scale_run(steps=args.steps)
  print("Dynamic loss scaling (tf.mixed_precision.experimental."
        "DynamicLossScale, increment_period=4)\n")
  print(f"{'step':>4}  {'loss':>10}  {'scale used':>10}  {'applied':>7}  "
        f"{'next scale':>10}  {'good steps':>10}")
  for i, h in enumerate(history):
    loss = f"{h['loss']:.4f}" if np.isfinite(h["loss"]) else "overflow"
    print(f"{i:>4}  {loss:>10}  {h['scale']:>10g}  "
          f"{'yes' if h['applied'] else 'SKIP':>7}  {h['new_scale']:>10g}  "
          f"{h['good_steps']:>10}")
  skipped = [i for i, h in enumerate(history) if not h["applied"]]
  scales = [h["new_scale"] for h in history]
  print(f"\nskipped steps: {skipped}")
  print(f"scale: start {history[0]['scale']:g}, max {max(scales):g}, "
        f"min {min(scales):g}, final {scales[-1]:g}")


if __name__ == "__main__":
  main()
