"""TF 2.3/2.4 Keras SavedModels load with their optimizer state (tf_keras).

`tf.keras.models.load_model(dir)` on the tf_keras target rebuilds the model
and its loss-scale optimizer from the SavedModel TF 2.3.4/2.4.4 wrote
(tools/gen_legacy_saved_models.py), and, after `install()`, also restores
what the file holds of the optimizer: iterations, slots, loss scale and
counter. TF 2.4 itself (and tf_keras without the package) left those fresh,
so a job resuming from its SavedModel silently restarted its optimizer.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import tf_mixed_precision_compat as mp

_FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures",
                         "legacy")
CASES = ("sm_tf23_seq_sgd", "sm_tf24_func_adam")


pytestmark = pytest.mark.usefixtures("installed")


def _meta(case):
  with open(os.path.join(_FIXTURES, case + ".json")) as f:
    return json.load(f)


def _layer_variable(model, key):
  layer_name, weight = key.split("/")
  return getattr(model.get_layer(layer_name), weight)


def _slot(opt, var, name):
  inner = opt.inner_optimizer
  if hasattr(inner, "get_slot"):
    return inner.get_slot(var, name)
  current = {"m": "m", "v": "v", "momentum": "m"}[name]
  (slot,) = [v for v in inner.variables if v.name == f"{current}/{var.name}"]
  return slot


@pytest.mark.parametrize("case", CASES)
def test_load_model_restores_the_optimizer_state(case):
  meta = _meta(case)
  model = tf.keras.models.load_model(os.path.join(_FIXTURES, case))
  opt = model.optimizer
  assert isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer)
  assert int(opt.iterations.numpy()) == meta["iterations"]
  assert float(opt.loss_scale.numpy()) == meta["loss_scale"]
  assert int(opt.dynamic_counter.numpy()) == meta["counter"]
  for key, value in meta["weights"].items():
    np.testing.assert_array_equal(_layer_variable(model, key).numpy(),
                                  np.asarray(value, np.float32), err_msg=key)
  for key, slots in meta["slots"].items():
    var = _layer_variable(model, key)
    for name, value in slots.items():
      np.testing.assert_array_equal(_slot(opt, var, name).numpy(),
                                    np.asarray(value, np.float32),
                                    err_msg=f"{key} {name}")


def test_uninstall_puts_back_tf_keras_load_model():
  meta = _meta("sm_tf24_func_adam")
  patched = tf.keras.models.load_model
  mp.uninstall()
  original = tf.keras.models.load_model
  try:
    assert original is not patched and patched.__wrapped__ is original
    model = tf.keras.models.load_model(
        os.path.join(_FIXTURES, "sm_tf24_func_adam"))
    # What TF 2.4 and tf_keras do by themselves: a fresh optimizer.
    assert int(model.optimizer.iterations.numpy()) == 0
    assert meta["iterations"] > 0
  finally:
    mp.install()
  assert tf.keras.models.load_model.__wrapped__ is original
