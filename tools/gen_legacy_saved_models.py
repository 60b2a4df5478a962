"""Writes TF 2.3/2.4 `model.save()` H5 files and SavedModels as fixtures.

Run once under each reference interpreter (each writes only its own files):

    .ref/tf23/bin/python tools/gen_legacy_saved_models.py
    .ref/tf24/bin/python tools/gen_legacy_saved_models.py

Each case compiles a tiny `mixed_float16` model with a loss-scale optimizer,
fits it a few steps on data whose large targets make early steps overflow
(so a dynamic scale ends mid-trajectory), and saves it with its optimizer:
`h5_<version>_<case>.h5` or the SavedModel directory `sm_<version>_<case>/`.
`<name>.json` records every number the original held: weights (by layer and
weight name), the optimizer's weights as TF named them, slots, iterations,
learning rate, loss scale, counter, and the predictions of the saved model on
`probe_inputs`. `lambda_<version>.h5` / `sm_lambda_<version>/` hold a model
with a Lambda layer (for the safe-mode tests).
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


def _lso(inner, api, initial_scale, growth_steps):
  if api == "v2":
    return K.mixed_precision.LossScaleOptimizer(
        inner, initial_scale=initial_scale, dynamic_growth_steps=growth_steps)
  loss_scale = tf.mixed_precision.experimental.DynamicLossScale(
      initial_loss_scale=initial_scale, increment_period=growth_steps)
  return K.mixed_precision.experimental.LossScaleOptimizer(inner, loss_scale)


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
  if kind == "lambda":
    return K.Sequential([
        K.layers.Dense(2, input_shape=(4,), name="d"),
        K.layers.Lambda(lambda t: t * 2.0, name="double"),
    ], name="with_lambda")
  raise ValueError(kind)


def _inner(name):
  if name == "sgd":
    return K.optimizers.SGD(learning_rate=0.05, momentum=0.9)
  return K.optimizers.Adam(learning_rate=0.01)


def _data():
  rng = np.random.RandomState(11)
  x = rng.normal(size=(40, 4)).astype(np.float32)
  y = (3.0 * (x @ rng.normal(size=(4, 1)))).astype(np.float32)
  return x, y


PROBE = np.linspace(-1.5, 1.5, 12, dtype=np.float32).reshape(3, 4)


def _inner_of(opt):
  return getattr(opt, "inner_optimizer", None) or opt._optimizer  # pylint: disable=protected-access


def _scale_and_counter(opt):
  if hasattr(opt, "dynamic"):
    return float(opt.loss_scale), int(opt.dynamic_counter)
  loss_scale = opt.loss_scale
  return float(loss_scale()), int(loss_scale._num_good_steps.numpy())  # pylint: disable=protected-access


def _record(model, opt):
  inner = _inner_of(opt)
  weights, slots = {}, {}
  for layer in model.layers:
    for w in layer.weights:
      key = layer.name + "/" + w.name.split("/")[-1].split(":")[0]
      weights[key] = w.numpy().tolist()
      if w.trainable:
        slots[key] = {s: inner.get_slot(w, s).numpy().tolist()
                      for s in inner.get_slot_names()}
  hypers = {name: float(inner._get_hyper(name).numpy())  # pylint: disable=protected-access
            for name in ("learning_rate", "momentum", "decay", "beta_1",
                         "beta_2") if name in inner._hyper}  # pylint: disable=protected-access
  scale, counter = _scale_and_counter(opt)
  return {
      "tensorflow_version": tf.__version__,
      "weights": weights,
      "slots": slots,
      "optimizer_weight_names": [w.name for w in opt.weights],
      "iterations": int(inner.iterations.numpy()),
      "hyperparameters": hypers,
      "loss_scale": scale,
      "counter": counter,
      "probe_inputs": PROBE.tolist(),
      "predictions": model.predict(PROBE).tolist(),
  }


def _write(path, record):
  with open(path, "w") as f:
    json.dump(record, f, indent=1, sort_keys=True,
              default=lambda o: o.item() if hasattr(o, "item") else str(o))
    f.write("\n")


def _trained(kind, opt_name, api, initial_scale, growth_steps, steps):
  K.backend.clear_session()
  tf.random.set_seed(5)
  _set_policy("mixed_float16")
  model = _model(kind)
  opt = _lso(_inner(opt_name), api, initial_scale, growth_steps)
  model.compile(optimizer=opt, loss="mse")
  x, y = _data()
  trajectory = []
  record_step = K.callbacks.LambdaCallback(
      on_train_batch_end=lambda batch, logs: trajectory.append(
          _scale_and_counter(opt)))
  model.fit(x, y, batch_size=4, epochs=1, steps_per_epoch=steps, verbose=0,
            shuffle=False, callbacks=[record_step])
  return model, opt, trajectory


# (name, format, model kind, optimizer, LSO API, initial scale, growth steps)
CASES = {
    "tf23": [
        ("func_adam", "h5", "functional", "adam", "experimental", 2**15, 3),
        ("seq_sgd", "sm", "sequential", "sgd", "experimental", 2**15, 3),
    ],
    "tf24": [
        ("func_sgd", "h5", "functional", "sgd", "v2", 2**15, 3),
        ("seq_adam_exp", "h5", "sequential", "adam", "experimental", 2**14,
         2),
        ("func_adam", "sm", "functional", "adam", "v2", 2**15, 4),
    ],
}


def main():
  os.makedirs(OUT, exist_ok=True)
  for name, fmt, kind, opt_name, api, scale, growth in CASES[VERSION]:
    model, opt, trajectory = _trained(kind, opt_name, api, scale, growth,
                                      steps=8)
    record = _record(model, opt)
    record["trajectory"] = trajectory
    record.update({"case": name, "model": kind, "optimizer": opt_name,
                   "lso_api": api, "initial_scale": scale,
                   "growth_steps": growth, "format": fmt})
    if fmt == "h5":
      path = os.path.join(OUT, f"h5_{VERSION}_{name}.h5")
      if os.path.exists(path):
        os.remove(path)
      model.save(path)
    else:
      path = os.path.join(OUT, f"sm_{VERSION}_{name}")
      shutil.rmtree(path, ignore_errors=True)
      model.save(path)
      record["variables"] = tf.train.list_variables(
          os.path.join(path, "variables", "variables"))
      record["reloaded_predictions"] = tf.saved_model.load(path)(
          tf.constant(PROBE)).numpy().tolist()
    _write(os.path.splitext(path)[0] + ".json", record)
    print(name, fmt, "scale", record["loss_scale"], "counter",
          record["counter"], "iterations", record["iterations"])
  # Models with a Lambda layer: loading them must need safe_mode=False.
  model, opt, _ = _trained("lambda", "sgd", "experimental", 2**15, 3, steps=2)
  h5 = os.path.join(OUT, f"lambda_{VERSION}.h5")
  if os.path.exists(h5):
    os.remove(h5)
  model.save(h5)
  sm = os.path.join(OUT, f"sm_lambda_{VERSION}")
  shutil.rmtree(sm, ignore_errors=True)
  model.save(sm)
  record = _record(model, opt)
  _write(os.path.join(OUT, f"lambda_{VERSION}.json"), record)


if __name__ == "__main__":
  main()
