r"""TF 2.4's own figures for `memory_probe.py`'s step: run under TF 2.4.4.

The same step as `memory_probe.py` (a tanh MLP of `--vars` float32
variables of `--width`², batch 64, Adam at 1e-4, loss scale 2**15), with
TF 2.4's `tf.keras.optimizers.Adam` bare or wrapped in its
`tf.keras.mixed_precision.LossScaleOptimizer` (dynamic, or fixed with
`--contender lso_fixed`), alone in this process. Same phases and
measurement as `memory_probe.py` (CPU: peak RSS reset between the phases;
`--device gpu`: `get_memory_info("GPU:0")["peak"]`). Prints one JSON
object.

Usage (the reference environment's interpreter):

  /path/to/tf24/bin/python benchmarks/memory_probe_tf24.py --contender lso
"""

import argparse
import gc
import json
import statistics
import time

import numpy as np
import tensorflow as tf

_SCALE = 2.**15


def _rss(field):
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1]) * 1024
  raise OSError(field)


def _reset(device):
  gc.collect()
  if device == "gpu":
    tf.config.experimental.reset_memory_stats("GPU:0")
  else:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")


def _peak(device):
  if device == "gpu":
    return tf.config.experimental.get_memory_info("GPU:0")["peak"]
  return _rss("VmHWM")


def _step_fn(contender, num_vars, width, jit):
  """The variables and the `tf.function` step of `contender`."""
  rng = np.random.default_rng(0)
  variables = [tf.Variable((rng.standard_normal((width, width)) /
                            np.sqrt(width)).astype(np.float32))
               for _ in range(num_vars)]
  x = tf.constant(rng.standard_normal((64, width)).astype(np.float32))
  opt = tf.keras.optimizers.Adam(1e-4)
  if contender == "lso":
    opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)
  elif contender == "lso_fixed":
    opt = tf.keras.mixed_precision.LossScaleOptimizer(
        opt, dynamic=False, initial_scale=_SCALE)

  def step():
    with tf.GradientTape() as tape:
      h = x
      for w in variables:
        h = tf.tanh(tf.matmul(h, w))
      loss = tf.reduce_mean(tf.square(h))
      target = loss if contender == "bare" else opt.get_scaled_loss(loss)
    grads = tape.gradient(target, variables)
    if contender != "bare":
      grads = opt.get_unscaled_gradients(grads)
    opt.apply_gradients(zip(grads, variables))
    return loss

  # TF 2.4 spells it `experimental_compile`.
  return tf.function(step, experimental_compile=jit)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--contender", required=True,
                      choices=("bare", "lso", "lso_fixed"))
  parser.add_argument("--mode", default="function", choices=("function", "jit"))
  parser.add_argument("--vars", type=int, default=16)
  parser.add_argument("--width", type=int, default=2048)
  parser.add_argument("--steps", type=int, default=5)
  parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
  args = parser.parse_args()
  device = "/GPU:0" if args.device == "gpu" else "/CPU:0"
  with tf.device(device):
    step = _step_fn(args.contender, args.vars, args.width,
                    args.mode == "jit")
    gc.collect()
    start = time.perf_counter()
    step().numpy()
    first_s = time.perf_counter() - start
    first_peak = _peak(args.device)
    _reset(args.device)
    times = []
    for _ in range(args.steps):
      start = time.perf_counter()
      step().numpy()
      times.append(time.perf_counter() - start)
  print(json.dumps({
      "contender": args.contender, "mode": args.mode,
      "tensorflow": tf.__version__, "device": device,
      "first_call_s": first_s, "first_phase_peak_bytes": first_peak,
      "steps_peak_bytes": _peak(args.device),
      "step_ms": statistics.median(times) * 1e3}))


if __name__ == "__main__":
  main()
