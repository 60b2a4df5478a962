"""Records the Keras LossScaleOptimizer fixtures with the real TF 2.3.4 / 2.4.4.

Run once under each reference interpreter; each writes its own files under
tests/fixtures/keras_lso/ (only small JSON files and TF checkpoints):

    .ref/tf24/bin/python tools/gen_tf24_lso_fixtures.py
    .ref/tf23/bin/python tools/gen_tf24_lso_fixtures.py

TF 2.4.4 writes
  * sequences_tf24.json: per-step loss scale, counter, iterations and variable
    values of `tf.keras.mixed_precision.LossScaleOptimizer(SGD)` fed with
    recorded finite / non-finite gradients (for the differential test);
  * ckpt_tf24/: a `tf.train.Checkpoint(model=..., optimizer=...)` with the
    dynamic loss scale mid-trajectory, and ckpt_tf24.json describing it;
  * configs_tf24.json: `get_config()` / `tf.keras.optimizers.serialize()` of
    both LossScaleOptimizer classes.
TF 2.3.4 writes ckpt_tf23/, ckpt_tf23.json and configs_tf23.json, using the
experimental LossScaleOptimizer it had.
"""

import json
import os
import shutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

OUT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
    "fixtures", "keras_lso")
VERSION = "tf" + "".join(tf.__version__.split(".")[:2])
NAN = float("nan")
INF = float("inf")


def _f(x):
  """JSON-friendly float (NaN/inf as strings)."""
  x = float(x)
  if np.isnan(x):
    return "nan"
  if np.isinf(x):
    return "inf" if x > 0 else "-inf"
  return x


def _lso(opt, **kwargs):
  if VERSION == "tf23":
    if kwargs.get("dynamic", True):
      ls = tf.mixed_precision.experimental.DynamicLossScale(
          initial_loss_scale=kwargs.get("initial_scale", 2**15),
          increment_period=kwargs.get("dynamic_growth_steps", 2000))
    else:
      ls = kwargs["initial_scale"]
    return tf.keras.mixed_precision.experimental.LossScaleOptimizer(opt, ls)
  return tf.keras.mixed_precision.LossScaleOptimizer(opt, **kwargs)


def _scale_and_counter(opt):
  if VERSION == "tf23":
    ls = opt.loss_scale
    return float(ls()), int(ls._num_good_steps.numpy())  # pylint: disable=protected-access
  return float(opt.loss_scale.numpy()), int(opt.dynamic_counter.numpy())


# Gradients per step for two variables; None means "no gradient".
_GRAD_STEPS = [
    [[0.5, -1.0], [2.0]],
    [[0.25, 0.125], [-1.0]],
    [[INF, 1.0], [1.0]],
    [[1.0, 1.0], [NAN]],
    [[0.3, -0.7], [0.1]],
    [[0.1, 0.2], None],
    [[-0.5, 0.75], [0.3]],
    [[-INF, 0.0], [0.0]],
    [[1e-3, 3e-3], [7e-3]],
    [[0.6, 0.6], [0.6]],
    [[0.9, -0.1], [0.2]],
]

# Loss coefficients per step for the tape-based sequence: loss = sum(c * v**2)
# with the loss scaled; large coefficients overflow once scaled.
_LOSS_STEPS = [1.0, 0.5, 1e36, 2.0, 0.25, 1e37, 1.5, 0.75, 1.0, 0.1]


def _sequence_apply(momentum, initial_scale, growth_steps):
  v1 = tf.Variable([1.0, -2.0])
  v2 = tf.Variable([3.0])
  opt = _lso(tf.keras.optimizers.SGD(0.5, momentum=momentum),
             initial_scale=initial_scale, dynamic_growth_steps=growth_steps)
  steps = []
  for g1, g2 in _GRAD_STEPS:
    grads = [tf.constant(g1), None if g2 is None else tf.constant(g2)]
    opt.apply_gradients(zip(grads, [v1, v2]))
    scale, counter = _scale_and_counter(opt)
    steps.append({
        "grads": [[_f(x) for x in g1], None if g2 is None else
                  [_f(x) for x in g2]],
        "loss_scale": scale,
        "counter": counter,
        "iterations": int(opt.iterations.numpy()),
        "variables": [[float(x) for x in v1.numpy()],
                      [float(x) for x in v2.numpy()]],
    })
  return {
      "initial_variables": [[1.0, -2.0], [3.0]],
      "learning_rate": 0.5,
      "momentum": momentum,
      "initial_scale": initial_scale,
      "dynamic_growth_steps": growth_steps,
      "steps": steps,
  }


def _sequence_tape(initial_scale, growth_steps):
  var = tf.Variable([1.0, -2.0, 0.5])
  opt = _lso(tf.keras.optimizers.SGD(0.125),
             initial_scale=initial_scale, dynamic_growth_steps=growth_steps)
  steps = []
  for c in _LOSS_STEPS:
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(c * var * var)
      scaled = opt.get_scaled_loss(loss)
    (grad,) = opt.get_unscaled_gradients(tape.gradient(scaled, [var]))
    opt.apply_gradients([(grad, var)])
    scale, counter = _scale_and_counter(opt)
    steps.append({
        "coefficient": c,
        "loss_scale": scale,
        "counter": counter,
        "iterations": int(opt.iterations.numpy()),
        "variables": [[float(x) for x in var.numpy()]],
    })
  return {
      "initial_variables": [[1.0, -2.0, 0.5]],
      "learning_rate": 0.125,
      "initial_scale": initial_scale,
      "dynamic_growth_steps": growth_steps,
      "steps": steps,
  }


def write_sequences():
  data = {
      "tensorflow_version": tf.__version__,
      "apply_sgd": _sequence_apply(0.0, 4.0, 2),
      "apply_sgd_momentum": _sequence_apply(0.9, 2.0**15, 3),
      "tape_sgd": _sequence_tape(2.0**10, 3),
  }
  _dump("sequences_%s.json" % VERSION, data)


def write_checkpoint():
  tf.random.set_seed(1)
  model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))])
  opt = _lso(tf.keras.optimizers.SGD(0.01, momentum=0.9))
  x = tf.constant([[1.0, 2.0, 3.0]])
  # Two overflowing steps (scale 2**15 -> 2**13), then five finite ones.
  for factor in [INF, NAN, 1.0, 1.0, 1.0, 1.0, 1.0]:
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(model(x)) * factor
      scaled = opt.get_scaled_loss(loss)
    grads = opt.get_unscaled_gradients(
        tape.gradient(scaled, model.trainable_variables))
    opt.apply_gradients(zip(grads, model.trainable_variables))
  directory = os.path.join(OUT, "ckpt_%s" % VERSION)
  shutil.rmtree(directory, ignore_errors=True)
  path = tf.train.Checkpoint(model=model, optimizer=opt).save(
      os.path.join(directory, "ckpt"))
  scale, counter = _scale_and_counter(opt)
  _dump("ckpt_%s.json" % VERSION, {
      "tensorflow_version": tf.__version__,
      "prefix": os.path.relpath(path, OUT),
      "loss_scale": scale,
      "counter": counter,
      "iterations": int(opt.iterations.numpy()),
      "kernel": model.layers[0].kernel.numpy().tolist(),
      "bias": model.layers[0].bias.numpy().tolist(),
      "variables": sorted(
          [name, list(shape)] for name, shape in tf.train.list_variables(path)),
  })


def write_configs():
  k = tf.keras.optimizers
  cases = {
      "dynamic_sgd": _lso(k.SGD(0.1, momentum=0.9, nesterov=True)),
      "dynamic_custom_adam": _lso(k.Adam(0.002, beta_1=0.8, epsilon=1e-5),
                                  initial_scale=1024,
                                  dynamic_growth_steps=500),
      "fixed_rmsprop": _lso(k.RMSprop(0.01, rho=0.8), dynamic=False,
                            initial_scale=128),
      "dynamic_sgd_decay": _lso(k.SGD(0.1, decay=0.01)),
      "fixed_adam_clipnorm_named": _lso(
          k.Adam(0.001, name="MyAdam", amsgrad=True), dynamic=False,
          initial_scale=64),
  }
  if VERSION == "tf24":
    exp = tf.keras.mixed_precision.experimental.LossScaleOptimizer
    cases["v1_dynamic"] = exp(k.SGD(0.1), "dynamic")
    cases["v1_fixed"] = exp(k.Adam(0.01), 32)
  data = {"tensorflow_version": tf.__version__}
  for name, opt in cases.items():
    data[name] = {
        "class": type(opt).__name__,
        "get_config": opt.get_config(),
        "serialize": k.serialize(opt),
    }
  if VERSION == "tf23":
    # A DynamicLossScale whose multiplier is not 2 cannot be converted to the
    # TF 2.4 class; TF 2.4's from_config rejects it.
    opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
        k.SGD(0.1),
        tf.mixed_precision.experimental.DynamicLossScale(
            initial_loss_scale=8, increment_period=3, multiplier=4))
    data["dynamic_multiplier_4"] = {
        "class": type(opt).__name__,
        "get_config": opt.get_config(),
        "serialize": k.serialize(opt),
    }
  _dump("configs_%s.json" % VERSION, data)


def _dump(name, data):
  os.makedirs(OUT, exist_ok=True)
  with open(os.path.join(OUT, name), "w") as f:
    json.dump(data, f, indent=1, sort_keys=True)
    f.write("\n")
  print("wrote", name)


def main():
  if VERSION not in ("tf23", "tf24"):
    raise SystemExit("Run under TF 2.3.4 or TF 2.4.4, not %s" % tf.__version__)
  if VERSION == "tf24":
    write_sequences()
  write_checkpoint()
  write_configs()


if __name__ == "__main__":
  main()
