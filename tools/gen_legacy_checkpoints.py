"""Writes TF 2.2-2.4 mixed-precision Keras checkpoints (tests/fixtures/legacy/).

Run once under each reference interpreter (each writes only its own files):

    .ref/tf22/bin/python tools/gen_legacy_checkpoints.py
    .ref/tf23/bin/python tools/gen_legacy_checkpoints.py
    .ref/tf24/bin/python tools/gen_legacy_checkpoints.py

Every case trains a tiny `mixed_float16` model a few steps with a custom
GradientTape loop through a loss-scale optimizer (some steps overflow, so a
dynamic scale ends mid-trajectory), then saves `tf.train.Checkpoint(model=...,
optimizer=...)`, with `Checkpoint.save` or a `tf.train.CheckpointManager`.
`ckpt_<version>_<case>.json` next to the checkpoint records every number the
original held: weights, slots (TF's slot names), iterations, learning rate and
other hyperparameter variables, loss scale and counter, plus
`tf.train.list_variables`.

Under TF 2.3 the script also writes `demo_tf23/`: the job that
`examples/demo/demo.py` resumes from its copy in `data/` (a Dense 32-16-1
regression, experimental LossScaleOptimizer "dynamic" over SGD with momentum,
saved by a CheckpointManager), described in `demo_tf23/job.json`.
"""

import json
import os
import shutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

OUT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
    "fixtures", "legacy")
VERSION = "tf" + "".join(tf.__version__.split(".")[:2])
K = tf.keras


def _set_policy(name):
  if VERSION == "tf24":
    K.mixed_precision.set_global_policy(name)
  else:
    K.mixed_precision.experimental.set_policy(name)


def _lso(inner, api, dynamic, initial_scale, growth_steps):
  """A loss-scale optimizer of the requested API ("experimental" or "v2")."""
  if api == "v2":
    if dynamic:
      return K.mixed_precision.LossScaleOptimizer(
          inner, initial_scale=initial_scale,
          dynamic_growth_steps=growth_steps)
    return K.mixed_precision.LossScaleOptimizer(
        inner, dynamic=False, initial_scale=initial_scale)
  if dynamic:
    loss_scale = tf.mixed_precision.experimental.DynamicLossScale(
        initial_loss_scale=initial_scale, increment_period=growth_steps)
  else:
    loss_scale = initial_scale
  return K.mixed_precision.experimental.LossScaleOptimizer(inner, loss_scale)


class Net(K.Model):
  """The subclassed model: an encoder and a list of two heads."""

  def __init__(self):
    super().__init__(name="net")
    self.encoder = K.layers.Dense(5, activation="relu", name="encoder")
    self.heads = [K.layers.Dense(3, activation="relu", name="head0"),
                  K.layers.Dense(1, name="head1")]
    self.out = K.layers.Activation("linear", dtype="float32", name="out")

  def call(self, x):
    x = self.encoder(x)
    for head in self.heads:
      x = head(x)
    return self.out(x)


def _model(kind):
  if kind == "sequential":
    return K.Sequential([
        K.layers.Dense(6, activation="relu", input_shape=(4,), name="hidden"),
        K.layers.Dense(1, name="logits"),
        K.layers.Activation("linear", dtype="float32", name="out"),
    ], name="seq")
  if kind == "functional":
    inputs = K.Input((4,), name="x")
    h = K.layers.Dense(6, name="d1")(inputs)
    h = K.layers.BatchNormalization(name="bn")(h)
    h = K.layers.Activation("relu", name="relu")(h)
    h = K.layers.Dense(1, name="d2")(h)
    outputs = K.layers.Activation("linear", dtype="float32", name="out")(h)
    return K.Model(inputs, outputs, name="func")
  if kind == "subclassed":
    model = Net()
    model(tf.zeros((1, 4)))
    return model
  raise ValueError(kind)


def _inner(name):
  if name == "sgd":
    return K.optimizers.SGD(learning_rate=0.05, momentum=0.9)
  if name == "adam":
    return K.optimizers.Adam(learning_rate=0.01)
  raise ValueError(name)


def _data(seed, n, features, target_scale):
  """Synthetic regression data, reproducible from `seed` with NumPy alone."""
  rng = np.random.RandomState(seed)
  x = rng.normal(size=(n, features)).astype(np.float32)
  w = rng.normal(size=(features, 1)).astype(np.float32)
  y = (target_scale * (x @ w)).astype(np.float32)
  return x, y


def _state(opt):
  if hasattr(opt, "dynamic"):  # TF 2.4's class (also its experimental one).
    if not opt.dynamic:
      return float(opt.loss_scale), None
    return float(opt.loss_scale), int(opt.dynamic_counter)
  loss_scale = opt.loss_scale
  scale = float(loss_scale())
  counter = getattr(loss_scale, "_num_good_steps", None)
  return scale, None if counter is None else int(counter.numpy())


def _train(model, opt, x, y, steps, batch):
  """Custom loop; returns per-step records (loss, scale, counter, skipped)."""

  @tf.function
  def step(xb, yb):
    with tf.GradientTape() as tape:
      pred = model(xb, training=True)
      loss = tf.reduce_mean(tf.square(pred - yb))
      scaled = opt.get_scaled_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    grads = opt.get_unscaled_gradients(grads)
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g))
                            for g in grads])
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss, finite

  trajectory = []
  batches = len(x) // batch
  for i in range(steps):
    j = i % batches
    loss, finite = step(x[j * batch:(j + 1) * batch],
                        y[j * batch:(j + 1) * batch])
    scale, counter = _state(opt)
    trajectory.append({"step": i + 1, "loss": float(loss),
                       "skipped": not bool(finite), "loss_scale": scale,
                       "counter": counter})
  return trajectory


def _inner_of(opt):
  return getattr(opt, "inner_optimizer", None) or opt._optimizer  # pylint: disable=protected-access


def _weight_key(model, var):
  """'<layer name>/<weight name>', the key tests use to find the weight."""
  for layer in _all_layers(model):
    for w in layer.weights:
      if w is var:
        return layer.name + "/" + w.name.split("/")[-1].split(":")[0]
  raise ValueError(var.name)


def _all_layers(model):
  layers = []
  for layer in model.submodules:
    if isinstance(layer, K.layers.Layer) and not isinstance(layer, K.Model):
      layers.append(layer)
  return layers


def _record(model, opt, scale_kind):
  inner = _inner_of(opt)
  weights = {_weight_key(model, v): v.numpy().tolist() for v in model.weights}
  slots = {}
  for v in model.trainable_variables:
    slots[_weight_key(model, v)] = {
        name: inner.get_slot(v, name).numpy().tolist()
        for name in inner.get_slot_names()}
  hypers = {}
  for name in ("learning_rate", "momentum", "decay", "beta_1", "beta_2"):
    if name in inner._hyper:  # pylint: disable=protected-access
      hypers[name] = float(inner._get_hyper(name).numpy())  # pylint: disable=protected-access
  scale, counter = _state(opt)
  return {
      "weights": weights,
      "trainable": [_weight_key(model, v) for v in model.trainable_variables],
      "slots": slots,
      "iterations": int(inner.iterations.numpy()),
      "hyperparameters": hypers,
      "loss_scale_kind": scale_kind,
      "loss_scale": scale,
      "counter": counter,
  }


def _write(path, record):
  with open(path, "w") as f:
    json.dump(record, f, indent=1, sort_keys=True,
              default=lambda o: o.item() if hasattr(o, "item") else str(o))
    f.write("\n")


# (case name, model kind, optimizer, LSO API, dynamic, initial scale,
#  growth steps, saver). TF 2.2/2.3 only had the experimental API.
CASES = {
    "tf22": [
        ("seq_sgd_dynamic", "sequential", "sgd", "experimental", True, 2**15,
         3, "manager"),
        ("func_adam_dynamic", "functional", "adam", "experimental", True,
         2**12, 4, "checkpoint"),
        ("sub_adam_fixed", "subclassed", "adam", "experimental", False, 16,
         None, "checkpoint"),
    ],
    "tf23": [
        ("seq_adam_dynamic", "sequential", "adam", "experimental", True,
         2**15, 3, "manager"),
        ("func_sgd_fixed", "functional", "sgd", "experimental", False, 8,
         None, "checkpoint"),
        ("sub_sgd_dynamic", "subclassed", "sgd", "experimental", True, 2**13,
         4, "checkpoint"),
    ],
    "tf24": [
        ("seq_sgd_fixed", "sequential", "sgd", "v2", False, 32, None,
         "checkpoint"),
        ("func_adam_dynamic", "functional", "adam", "v2", True, 2**15, 3,
         "manager"),
        ("sub_adam_dynamic_exp", "subclassed", "adam", "experimental", True,
         2**14, 5, "checkpoint"),
    ],
}


def _case(name, kind, opt_name, api, dynamic, initial_scale, growth_steps,
          saver):
  tf.keras.backend.clear_session()
  tf.random.set_seed(1)
  _set_policy("mixed_float16")
  model = _model(kind)
  opt = _lso(_inner(opt_name), api, dynamic, initial_scale, growth_steps)
  x, y = _data(seed=7, n=48, features=4, target_scale=3.)
  trajectory = _train(model, opt, x, y, steps=11, batch=8)
  directory = os.path.join(OUT, f"ckpt_{VERSION}_{name}")
  shutil.rmtree(directory, ignore_errors=True)
  ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
  if saver == "manager":
    manager = tf.train.CheckpointManager(ckpt, directory, max_to_keep=1)
    prefix = manager.save()
    location = os.path.basename(directory)
  else:
    prefix = ckpt.save(os.path.join(directory, "ckpt"))
    location = os.path.relpath(prefix, OUT)
  record = _record(model, opt, "dynamic" if dynamic else "fixed")
  record.update({
      "tensorflow_version": tf.__version__,
      "case": name,
      "model": kind,
      "optimizer": opt_name,
      "inner_config": _inner_of(opt).get_config(),
      "lso_api": api,
      "initial_scale": initial_scale,
      "growth_steps": growth_steps,
      "saver": saver,
      "location": location,
      "trajectory": trajectory,
      "variables": tf.train.list_variables(prefix),
  })
  if kind != "subclassed":
    record["model_json"] = model.to_json()
  _write(directory + ".json", record)
  print(name, "scale", record["loss_scale"], "counter", record["counter"],
        "skipped", sum(t["skipped"] for t in trajectory))


DEMO = {
    "seed": 2023, "n": 256, "features": 8, "target_scale": 4.0,
    "batch_size": 32, "steps": 40, "learning_rate": 0.002, "momentum": 0.9,
}


def _demo():
  """The TF 2.3.4 job the demo resumes."""
  tf.keras.backend.clear_session()
  tf.random.set_seed(3)
  _set_policy("mixed_float16")
  model = K.Sequential([
      K.layers.Dense(32, activation="relu", input_shape=(DEMO["features"],),
                     name="dense"),
      K.layers.Dense(16, activation="relu", name="dense_1"),
      K.layers.Dense(1, name="dense_2"),
      K.layers.Activation("linear", dtype="float32", name="predictions"),
  ], name="regression")
  opt = K.mixed_precision.experimental.LossScaleOptimizer(
      K.optimizers.SGD(DEMO["learning_rate"], momentum=DEMO["momentum"]),
      "dynamic")
  x, y = _data(DEMO["seed"], DEMO["n"], DEMO["features"],
               DEMO["target_scale"])
  directory = os.path.join(OUT, "demo_tf23")
  shutil.rmtree(directory, ignore_errors=True)
  ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
  manager = tf.train.CheckpointManager(ckpt, directory, max_to_keep=2)
  half = DEMO["steps"] // 2
  trajectory = _train(model, opt, x, y, steps=half,
                      batch=DEMO["batch_size"])
  manager.save(checkpoint_number=half)
  # The second half continues the same batch stream.
  rest = _train_from(model, opt, x, y, half, DEMO["steps"],
                     DEMO["batch_size"])
  trajectory += rest
  prefix = manager.save(checkpoint_number=DEMO["steps"])
  record = _record(model, opt, "dynamic")
  record.update({
      "tensorflow_version": tf.__version__,
      "description": (
          "Dense 32-16-1 regression under mixed_float16, trained with "
          "tf.keras.mixed_precision.experimental.LossScaleOptimizer(SGD("
          "learning_rate, momentum), 'dynamic') and a GradientTape loop: "
          "step s (1-based) uses rows [(s-1) % (n // batch_size) * "
          "batch_size, +batch_size) of the data, loss = mean((pred - y)**2). "
          "Data: rng = numpy.random.RandomState(seed); x = rng.normal(size="
          "(n, features)).astype(float32); w = rng.normal(size=(features, "
          "1)).astype(float32); y = (target_scale * (x @ w)).astype(float32)."),
      "data": DEMO,
      "x_head": x[:2].tolist(),
      "y_head": y[:4, 0].tolist(),
      "model_json": model.to_json(),
      "checkpoint_directory": "demo_tf23",
      "latest_checkpoint": os.path.basename(prefix),
      "trajectory": trajectory,
      "variables": tf.train.list_variables(prefix),
  })
  _write(os.path.join(directory, "job.json"), record)
  print("demo", "scale", record["loss_scale"], "counter", record["counter"],
        "skipped", sum(t["skipped"] for t in trajectory))


def _train_from(model, opt, x, y, start, stop, batch):
  records = _train(model, opt, np.roll(x, -start * batch, axis=0),
                   np.roll(y, -start * batch, axis=0), stop - start, batch)
  for r in records:
    r["step"] += start
  return records


def main():
  os.makedirs(OUT, exist_ok=True)
  for case in CASES[VERSION]:
    _case(*case)
  if VERSION == "tf23":
    _demo()


if __name__ == "__main__":
  main()
