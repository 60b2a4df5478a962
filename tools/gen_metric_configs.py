"""Records how TF 2.4.4 saved each of its metrics in a training_config.

Run under the TF 2.4.4 reference interpreter (Python 3.8):

    .ref/tf24/bin/python tools/gen_metric_configs.py

`model.save("x.h5")` wrote every compiled metric as its serialized config:
a `tf.keras.metrics` class by class name and constructor arguments, a
metric given by name or function as a `MeanMetricWrapper` naming the
function. Writes `tests/fixtures/legacy/tf24_metric_configs.json`: the
entry TF 2.4.4 saved in the `training_config` (after `fit`, as
`ModelCheckpoint` saves) for each metric class (default arguments, or the
few they require) and each metric function, one model each.
"""

import inspect
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import h5py  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

OUT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
    "fixtures", "legacy", "tf24_metric_configs.json")
# Classes that are not metrics a job compiles with (bases, wrappers).
# MeanRelativeError: TF 2.4's `fit` fails on its normalizer tensor.
_SKIP = {"Metric", "Mean", "Sum", "MeanMetricWrapper", "MeanTensor",
         "SensitivitySpecificityBase", "MeanRelativeError"}
_ARGS = {"MeanIoU": {"num_classes": 2},
         "PrecisionAtRecall": {"recall": 0.5},
         "RecallAtPrecision": {"precision": 0.5},
         "SensitivityAtSpecificity": {"specificity": 0.5},
         "SpecificityAtSensitivity": {"sensitivity": 0.5}}


def _classes():
  return [value(**_ARGS.get(name, {}))
          for name, value in sorted(vars(tf.keras.metrics).items())
          if inspect.isclass(value) and
          issubclass(value, tf.keras.metrics.Metric) and name not in _SKIP]


def _functions():
  found = {}
  for name, value in sorted(vars(tf.keras.metrics).items()):
    if inspect.isfunction(value) and name not in ("serialize", "get",
                                                  "deserialize"):
      found.setdefault(value.__name__, value)  # Aliases: one each.
  return [found[name] for name in sorted(found)]


def _saved_metric(metric):
  """The metric's entry in the training_config of a job that ran `fit`."""
  for y in (tf.zeros((4, 3)), tf.zeros((4, 1))):  # Dense or sparse labels.
    model = tf.keras.Sequential([tf.keras.layers.Dense(3, input_shape=(2,))])
    model.compile("sgd", loss="mse", metrics=[metric])
    try:
      model.fit(tf.zeros((4, 2)), y, verbose=0)
    except (ValueError, tf.errors.InvalidArgumentError):
      continue
    path = OUT + ".h5"
    model.save(path)
    with h5py.File(path, "r") as f:
      training_config = json.loads(f.attrs["training_config"])
    os.remove(path)
    (saved,) = training_config["metrics"][0]
    return saved
  raise ValueError(f"no labels fit {metric}")


def main():
  record = {"tensorflow_version": tf.__version__,
            "metrics": [_saved_metric(m) for m in _classes() + _functions()]}
  with open(OUT, "w") as f:
    json.dump(record, f, indent=1, sort_keys=True)
  print("wrote", OUT, len(record["metrics"]))


if __name__ == "__main__":
  main()
