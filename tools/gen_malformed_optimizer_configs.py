"""Records how real TF 2.4.4 reacts to malformed old optimizer configs.

Run under the TF 2.4.4 reference interpreter (Python 3.8):

    .ref/tf24/bin/python tools/gen_malformed_optimizer_configs.py

For Adam, SGD and RMSprop configs as TF 2.4.4 serialized them (plain and
inside a `LossScaleOptimizer` config, TF 2.4's and TF 2.3's layouts), each
case breaks one thing: a negative decay, a negative, string, None or list
learning rate, an unknown key, a learning rate given as a `FixedLossScale` /
`DynamicLossScale` config (and, where a loss scale is expected, a schedule).
`tf.keras.optimizers.deserialize` is called on each; for what TF accepts, the
optimizer then takes 3 steps of `apply_gradients` with gradient 1 on a
variable starting at 1 (the first failure there is recorded instead, since TF
2.4 validated some learning rates only when first used).

Writes `tests/fixtures/keras_lso/malformed_configs_tf24.json`:
`{case: {"config", "deserialize": {"outcome": "accepted" | "raised", "type",
"message"}, "use": {"outcome", "type", "message", "value"}}}` plus
`keras2_arguments`: each Keras 2 optimizer's constructor arguments and the
keyword arguments every TF 2.4 optimizer allowed.
"""

import copy
import inspect
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # pylint: disable=g-import-not-at-top

OUT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
    "fixtures", "keras_lso", "malformed_configs_tf24.json")

FIXED = {"class_name": "FixedLossScale", "config": {"loss_scale_value": 5.0}}
DYNAMIC = {"class_name": "DynamicLossScale",
           "config": {"initial_loss_scale": 32768.0, "increment_period": 2000,
                      "multiplier": 2.0}}
SCHEDULE = {"class_name": "ExponentialDecay",
            "config": {"initial_learning_rate": 1.0, "decay_steps": 1,
                       "decay_rate": 0.5, "staircase": False, "name": None}}
BREAKS = {
    "negative_decay": {"decay": -0.5},
    "negative_lr": {"learning_rate": -0.1},
    "negative_lr_key": {"learning_rate": None, "lr": -0.1},
    "string_lr": {"learning_rate": "abc"},
    "none_lr": {"learning_rate": None},
    "list_lr": {"learning_rate": [1.0]},
    "unknown_key": {"foo": 1},
    "fixed_loss_scale_lr": {"learning_rate": FIXED},
    "dynamic_loss_scale_lr": {"learning_rate": DYNAMIC},
}


def _error(e):
  return {"outcome": "raised", "type": type(e).__name__, "message": str(e)}


def _use(optimizer):
  var = tf.Variable([1.0])
  try:
    for _ in range(3):
      optimizer.apply_gradients([(tf.constant([1.0]), var)])
  except Exception as e:  # pylint: disable=broad-except
    return _error(e)
  return {"outcome": "accepted", "value": float(var.numpy()[0])}


def _record(config):
  entry = {"config": copy.deepcopy(config)}
  try:
    # A copy: TF 2.4's deserialize lowercases the class names in place.
    optimizer = tf.keras.optimizers.deserialize(copy.deepcopy(config))
  except Exception as e:  # pylint: disable=broad-except
    entry["deserialize"] = _error(e)
    return entry
  entry["deserialize"] = {"outcome": "accepted",
                          "type": type(optimizer).__name__}
  entry["use"] = _use(optimizer)
  return entry


def _broken(base, change):
  config = copy.deepcopy(base)
  for key, value in change.items():
    if value is None and key == "learning_rate" and "lr" in change:
      config["config"].pop(key)
    else:
      config["config"][key] = value
  return config


def _cases():
  cases = {}
  for name in ("Adam", "SGD", "RMSprop"):
    base = tf.keras.optimizers.serialize(getattr(tf.keras.optimizers, name)())
    cases[f"{name}/valid"] = _record(base)
    for what, change in BREAKS.items():
      cases[f"{name}/{what}"] = _record(_broken(base, change))
    lso = tf.keras.optimizers.serialize(
        tf.keras.mixed_precision.LossScaleOptimizer(
            getattr(tf.keras.optimizers, name)()))
    for what, change in BREAKS.items():
      config = copy.deepcopy(lso)
      config["config"]["inner_optimizer"] = _broken(base, change)
      cases[f"LossScaleOptimizer/{name}/{what}"] = _record(config)
    tf23 = {"class_name": "LossScaleOptimizer",
            "config": {"optimizer": base, "loss_scale": FIXED}}
    cases[f"LossScaleOptimizerTF23/{name}/fixed_loss_scale"] = _record(tf23)
    for what, change in BREAKS.items():
      config = copy.deepcopy(tf23)
      config["config"]["optimizer"] = _broken(base, change)
      cases[f"LossScaleOptimizerTF23/{name}/{what}"] = _record(config)
  lso = tf.keras.optimizers.serialize(
      tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD()))
  for what, change in (("unknown_key", {"foo": 1}),
                       ("string_initial_scale", {"initial_scale": "abc"}),
                       ("string_dynamic", {"dynamic": "yes"})):
    config = copy.deepcopy(lso)
    config["config"].update(change)
    cases[f"LossScaleOptimizer/{what}"] = _record(config)
  for what, loss_scale in (("dynamic_loss_scale", DYNAMIC),
                           ("schedule_loss_scale", SCHEDULE),
                           ("negative_loss_scale", -3.0)):
    config = {"class_name": "LossScaleOptimizer",
              "config": {"optimizer": tf.keras.optimizers.serialize(
                  tf.keras.optimizers.SGD()), "loss_scale": loss_scale}}
    cases[f"LossScaleOptimizerTF23/{what}"] = _record(config)
  return cases


def _keras2_arguments():
  names = {}
  for name in ("Adam", "SGD", "RMSprop", "Adagrad", "Adadelta", "Adamax",
               "Nadam", "Ftrl"):
    cls = getattr(tf.keras.optimizers, name)
    names[name] = [p for p in inspect.signature(cls.__init__).parameters
                   if p not in ("self", "kwargs")]
  return names


def main():
  record = {"tensorflow_version": tf.__version__, "cases": _cases(),
            "keras2_arguments": _keras2_arguments(),
            "keras2_allowed_kwargs": sorted(_allowed_kwargs())}
  with open(OUT, "w") as f:
    json.dump(record, f, indent=1, sort_keys=True)
  print("wrote", OUT, len(record["cases"]), "cases")


def _allowed_kwargs():
  """The kwargs TF 2.4's OptimizerV2 accepted, found by asking it."""
  allowed = []
  for key in ("clipnorm", "clipvalue", "global_clipnorm", "lr", "decay",
              "epsilon_", "foo"):
    try:
      tf.keras.optimizers.SGD(**{key: 0.0})
    except TypeError:
      continue
    allowed.append(key)
  return allowed


if __name__ == "__main__":
  main()
