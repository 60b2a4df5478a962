"""Prints the peak of TensorFlow's CPU allocator over one case's training steps.

Run by `test_step_peak_memory.py` in a fresh interpreter with
`TF_CPU_ALLOCATOR_USE_BFC=true` (TensorFlow's CPU allocator keeps statistics
only then, and reads the variable when it starts). The allocator counts the
bytes of tensors alive at once, so unlike a process's resident set it hardly
moves between runs.

Usage (prints one JSON object):

  TF_CPU_ALLOCATOR_USE_BFC=true python tests/optimizers/peak_probe.py \
      --case tf24:function --vars 8
"""

import argparse
import gc
import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf

from tf_mixed_precision_compat.optimizers import loss_scale_optimizer
from tf_mixed_precision_compat.optimizers import (
    experimental_loss_scale_optimizer)

KINDS = ("bare", "tf24", "tf23", "fit_bare", "fit_tf24")
MODES = ("eager", "function", "jit", "mirrored")


def _optimizer(kind):
  inner = keras.optimizers.Adam(1e-3)
  if kind in ("tf24", "fit_tf24"):
    return loss_scale_optimizer.LossScaleOptimizer(inner)
  if kind == "tf23":
    return experimental_loss_scale_optimizer.LossScaleOptimizerV1(
        inner, "dynamic")
  return inner


def _custom_loop_step(kind, mode, num_vars, width):
  """A tanh MLP's step, written as a TF 2.4 custom loop writes it."""
  rng = np.random.default_rng(0)
  scale = 1. / np.sqrt(width)
  strategy = (tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
              if mode == "mirrored" else tf.distribute.get_strategy())
  with strategy.scope():
    variables = [tf.Variable(rng.normal(0., scale, (width, width))
                             .astype(np.float32)) for _ in range(num_vars)]
    opt = _optimizer(kind)
    opt.build(variables)
  x = tf.constant(rng.normal(0., 1., (64, width)).astype(np.float32))

  def body():
    with tf.GradientTape() as tape:
      h = x
      for v in variables:
        h = tf.tanh(h @ v)
      loss = tf.reduce_mean(tf.square(h))
      if kind != "bare":
        loss = opt.get_scaled_loss(loss)
    grads = tape.gradient(loss, variables)
    if kind != "bare":
      grads = opt.get_unscaled_gradients(grads)
    opt.apply_gradients(zip(grads, variables))
    return loss

  if mode == "eager":
    return body
  if mode == "mirrored":
    return tf.function(lambda: strategy.run(body))
  return tf.function(body, jit_compile=(mode == "jit"))


def _fit_step(kind, mode, num_vars, width):
  """`train_on_batch` of a Dense stack compiled with the optimizer."""
  model = keras.Sequential(
      [keras.Input((width,))] +
      [keras.layers.Dense(width, activation="tanh", use_bias=False)
       for _ in range(num_vars)])
  model.compile(optimizer=_optimizer(kind), loss="mse",
                jit_compile=(mode == "jit"))
  rng = np.random.default_rng(0)
  x = rng.normal(0., 1., (64, width)).astype(np.float32)
  y = np.zeros((64, width), np.float32)
  return lambda: model.train_on_batch(x, y)


def measure(kind, mode, num_vars, width, steps=3):
  """The allocator's peak over `steps` steps above its level before them.

  One case per process: the allocator counts whole chunks, so a case
  measured after others can come out higher, by what an earlier case's
  freed chunks add when they serve its requests whole.
  """
  make = _fit_step if kind.startswith("fit") else _custom_loop_step
  step = make(kind, mode, num_vars, width)
  for _ in range(2):  # Tracing, compiling, building the slots.
    step()
  gc.collect()
  tf.config.experimental.reset_memory_stats("CPU:0")
  resting = tf.config.experimental.get_memory_info("CPU:0")["current"]
  for _ in range(steps):
    step()
  peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
  return {"kind": kind, "mode": mode, "extra_peak_bytes": peak - resting}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument(
      "--case", required=True,
      help="KIND:MODE, with KIND in %s and MODE in %s" % (KINDS, MODES))
  parser.add_argument("--vars", type=int, default=8)
  parser.add_argument("--width", type=int, default=2048)
  args = parser.parse_args(argv)
  if os.environ.get("TF_CPU_ALLOCATOR_USE_BFC") != "true":
    sys.exit("peak_probe.py: set TF_CPU_ALLOCATOR_USE_BFC=true")
  # One thread each: ops run in an order that does not depend on timing, so
  # neither does the peak (with more, XLA's CPU runtime ran a step's parts
  # in an order that, on a loaded machine, held the scaled and the unscaled
  # gradients at once in one run of many).
  tf.config.threading.set_inter_op_parallelism_threads(1)
  tf.config.threading.set_intra_op_parallelism_threads(1)
  tf.config.set_logical_device_configuration(
      tf.config.list_physical_devices("CPU")[0],
      [tf.config.LogicalDeviceConfiguration()] * 2)
  case = args.case.split(":")
  if len(case) != 2 or case[0] not in KINDS or case[1] not in MODES:
    parser.error(f"--case: expected KIND:MODE, got {args.case!r}")
  print(json.dumps(measure(*case, args.vars, args.width)))


if __name__ == "__main__":
  main()
