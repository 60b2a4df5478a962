"""Writes TF 2.3/2.4 `model.save_weights` / `ModelCheckpoint` weight fixtures.

Run once under each reference interpreter (each writes only its own files
under tests/fixtures/legacy/):

    .ref/tf23/bin/python tools/gen_weights_fixtures.py
    .ref/tf24/bin/python tools/gen_weights_fixtures.py

Every case compiles a tiny `mixed_float16` model (Sequential, functional or
subclassed; the models of gen_legacy_checkpoints.py) with a loss-scale
optimizer, so that the model tracks it as TF 2.x Keras did, trains it, and
writes what TF 2.x jobs wrote for their weights:

* `weights_<version>_<case>/ckpt`: `model.save_weights("ckpt")`, the TF format
  (an object-based checkpoint rooted at the model, optimizer included), or
  for the `mc` cases the files `ModelCheckpoint(save_weights_only=True)` left
  after `model.fit` (with its `checkpoint` state file);
* `weights_<version>_<case>.h5`: `model.save_weights("w.h5")`, the H5 format
  (model weights only, in topological order);
* `weights_<version>_<case>.json`: every number the model and optimizer held
  (weights, slots under TF's names, iterations, loss scale and counter), the
  model JSON (not for subclassed models) and `tf.train.list_variables`.
"""

import os
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # pylint: disable=g-import-not-at-top

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_legacy_checkpoints as gen  # pylint: disable=g-import-not-at-top,wrong-import-position

OUT = gen.OUT
VERSION = gen.VERSION

# (case, model kind, optimizer, LSO API, dynamic, initial scale, growth
#  steps, how the TF-format weights were written).
CASES = {
    "tf23": [
        ("seq_adam_dynamic", "sequential", "adam", "experimental", True,
         2**15, 3, "save_weights"),
        ("func_sgd_dynamic", "functional", "sgd", "experimental", True,
         2**13, 4, "model_checkpoint"),
        ("sub_adam_fixed", "subclassed", "adam", "experimental", False, 16,
         None, "save_weights"),
    ],
    "tf24": [
        ("seq_sgd_dynamic", "sequential", "sgd", "v2", True, 2**14, 3,
         "model_checkpoint"),
        ("func_adam_dynamic", "functional", "adam", "v2", True, 2**15, 3,
         "save_weights"),
        ("sub_sgd_fixed", "subclassed", "sgd", "v2", False, 32, None,
         "save_weights"),
    ],
}


def _all_layers(model):
  """Leaf layers, walked through `model.layers` (after `compile`, TF 2.4's
  `model.submodules` trips over the compiled model's weak dictionary)."""
  found = []
  for layer in model.layers:
    if isinstance(layer, tf.keras.Model):
      found.extend(_all_layers(layer))
    else:
      found.append(layer)
  return found


gen._all_layers = _all_layers  # pylint: disable=protected-access


def _fit_with_model_checkpoint(model, x, y, directory):
  """`model.fit` saving TF-format weights each epoch; returns the prefix."""
  prefix = os.path.join(directory, "weights")
  callback = tf.keras.callbacks.ModelCheckpoint(prefix, save_weights_only=True)
  history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0,
                      callbacks=[callback])
  return prefix, [float(v) for v in history.history["loss"]]


def _case(name, kind, opt_name, api, dynamic, initial_scale, growth_steps,
          writer):
  tf.keras.backend.clear_session()
  tf.random.set_seed(5)
  gen._set_policy("mixed_float16")  # pylint: disable=protected-access
  model = gen._model(kind)  # pylint: disable=protected-access
  opt = gen._lso(gen._inner(opt_name), api, dynamic, initial_scale,  # pylint: disable=protected-access
                 growth_steps)
  model.compile(optimizer=opt, loss="mse")
  x, y = gen._data(seed=11, n=48, features=4, target_scale=3.)  # pylint: disable=protected-access
  directory = os.path.join(OUT, f"weights_{VERSION}_{name}")
  shutil.rmtree(directory, ignore_errors=True)
  os.makedirs(directory)
  if writer == "model_checkpoint":
    prefix, losses = _fit_with_model_checkpoint(model, x, y, directory)
  else:
    losses = [t["loss"] for t in gen._train(model, opt, x, y, steps=9,  # pylint: disable=protected-access
                                            batch=8)]
    prefix = os.path.join(directory, "ckpt")
    model.save_weights(prefix)
  h5_path = directory + ".h5"
  if os.path.exists(h5_path):
    os.remove(h5_path)
  model.save_weights(h5_path)
  record = gen._record(model, opt, "dynamic" if dynamic else "fixed")  # pylint: disable=protected-access
  record.update({
      "tensorflow_version": tf.__version__,
      "case": name,
      "model": kind,
      "optimizer": opt_name,
      "inner_config": gen._inner_of(opt).get_config(),  # pylint: disable=protected-access
      "lso_api": api,
      "initial_scale": initial_scale,
      "growth_steps": growth_steps,
      "writer": writer,
      "location": os.path.relpath(prefix, OUT),
      "h5": os.path.basename(h5_path),
      "losses": losses,
      "layer_order": [layer.name for layer in model.layers],
      "variables": tf.train.list_variables(prefix),
  })
  if kind != "subclassed":
    record["model_json"] = model.to_json()
  gen._write(directory + ".json", record)  # pylint: disable=protected-access
  print(name, "iterations", record["iterations"], "scale",
        record["loss_scale"], "counter", record["counter"])


def main():
  for case in CASES[VERSION]:
    _case(*case)


if __name__ == "__main__":
  main()
