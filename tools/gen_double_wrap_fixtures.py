"""Records what TF 2.3.4/2.4.4 raised for a second wrapper of one optimizer.

Run under each reference interpreter (each adds its own key):

    .ref/tf24/bin/python tools/gen_double_wrap_fixtures.py
    .ref/tf23/bin/python tools/gen_double_wrap_fixtures.py

Writes tests/fixtures/keras_lso/double_wrap.json: under "tf24" / "tf23", for
each pair of wrappers `"<first> <second>"` (`dynamic`:
`tf.keras.mixed_precision.LossScaleOptimizer(inner)`; `fixed`: the same with
`dynamic=False, initial_scale=8.`; `tf23`: the experimental class with
"dynamic"; `tf23_fixed`: with 8.; TF 2.3.4 has the experimental ones only),
what wrapping the same `tf.keras.optimizers.SGD` a second time raised, with
the first wrapper alive and after `del` and `gc.collect()`: `[type, message]`,
or null when nothing raised; and `v1`, the same for
`tf.compat.v1`'s `MixedPrecisionLossScaleOptimizer` around a
`GradientDescentOptimizer`.
"""

import gc
import json
import os

import tensorflow as tf

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   "tests", "fixtures", "keras_lso", "double_wrap.json")

mp = tf.keras.mixed_precision
WRAPPERS = {
    "tf23": lambda inner: mp.experimental.LossScaleOptimizer(inner, "dynamic"),
    "tf23_fixed": lambda inner: mp.experimental.LossScaleOptimizer(inner, 8.),
}
if hasattr(mp, "LossScaleOptimizer"):  # TF 2.4
  WRAPPERS["dynamic"] = mp.LossScaleOptimizer
  WRAPPERS["fixed"] = lambda inner: mp.LossScaleOptimizer(
      inner, dynamic=False, initial_scale=8.)


def _raised(fn):
  try:
    fn()
  except Exception as e:  # pylint: disable=broad-except
    return [type(e).__name__, str(e)]
  return None


def _twice(make_inner, first, second):
  # A fresh inner optimizer for each: a refused wrapper may have declared
  # some of its names before the one that clashed.
  inner = make_inner()
  kept = first(inner)
  alive = _raised(lambda: second(inner))
  inner = make_inner()
  kept = first(inner)
  del kept
  gc.collect()
  return {"alive": alive, "collected": _raised(lambda: second(inner))}


def main():
  record = {}
  for first_name, first in WRAPPERS.items():
    for second_name, second in WRAPPERS.items():
      record[f"{first_name} {second_name}"] = _twice(
          tf.keras.optimizers.SGD, first, second)
  v1 = getattr(tf.compat.v1.mixed_precision,
               "MixedPrecisionLossScaleOptimizer", None) or (
                   tf.compat.v1.train.experimental.
                   MixedPrecisionLossScaleOptimizer)
  record["v1"] = _twice(
      lambda: tf.compat.v1.train.GradientDescentOptimizer(1.0),
      lambda inner: v1(inner, "dynamic"), lambda inner: v1(inner, "dynamic"))
  data = {}
  if os.path.exists(OUT):
    with open(OUT) as f:
      data = json.load(f)
  data["tf" + "".join(tf.__version__.split(".")[:2])] = record
  with open(OUT, "w") as f:
    json.dump(data, f, indent=1, sort_keys=True)
    f.write("\n")


if __name__ == "__main__":
  main()
