"""What the public jobs print per step: the harness part, not the original's.

Imported by the jobs in this folder (they put the folder on `sys.path`), so it
runs under TF 2.3.4, TF 2.4.4 (Python 3.8) and TF 2.21. Each step prints one
JSON line: the loss scale, the dynamic counter (None for a fixed scale),
whether the step left the weights unchanged (skipped) and the optimizer's
iterations. `--out DIR` makes a job write its midway checkpoint there with its
own checkpoint code; `--resume DIR` makes it restore from DIR with its own
restore code and run the remaining steps.
"""

import argparse
import json

import numpy as np
import tensorflow as tf

STEPS = 10
MIDWAY = 5  # The checkpoint is written after this many steps.


def parse_args():
  parser = argparse.ArgumentParser()
  parser.add_argument("--out", default=None)
  parser.add_argument("--resume", default=None)
  return parser.parse_args()


def keras_state(opt):
  """(loss scale, counter) of a TF 2.3 or TF 2.4+ Keras loss-scale optimizer."""
  scale = opt.loss_scale
  if callable(scale) and not tf.is_tensor(scale):  # TF 2.3: a LossScale.
    counter = getattr(scale, "_num_good_steps", None)
    return (float(scale().numpy()),
            None if counter is None else int(counter.numpy()))
  counter = opt.dynamic_counter if opt.dynamic else None
  if counter is not None:
    counter = int(tf.convert_to_tensor(counter).numpy())
  return float(tf.convert_to_tensor(scale).numpy()), counter


def values(variables):
  return [np.array(v.numpy()) for v in variables]


def unchanged(before, after):
  return all(np.array_equal(a, b) for a, b in zip(before, after))


def record(step, scale, counter, skipped, iterations, **extra):
  out = {"step": int(step), "loss_scale": float(scale),
         "counter": None if counter is None else int(counter),
         "skipped": bool(skipped), "iterations": int(iterations)}
  out.update(extra)
  return out


def emit(rec):
  print(json.dumps(rec, sort_keys=True), flush=True)


def keras_record(step, opt, before, after):
  scale, counter = keras_state(opt)
  return record(step, scale, counter, unchanged(before, after),
                opt.iterations.numpy())


def checkpoint_event(path):
  print(json.dumps({"checkpoint": str(path)}), flush=True)
