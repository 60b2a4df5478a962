"""H5 models written by TF 2.3/2.4 load on the tf_keras target.

`tf.keras.models.load_model` restores the model, its loss-scale optimizer
(OptimizerV2 inside, as TF 2.4), iterations and slots. TF 2.3/2.4 wrote no
loss-scale variables into H5 files (asserted on the recorded weight names), so
the loss scale starts from the saved config's initial scale, as it did when
TF 2.4 loaded them.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import tf_mixed_precision_compat as mp

_FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "legacy")
CASES = ("h5_tf23_func_adam", "h5_tf24_func_sgd", "h5_tf24_seq_adam_exp")


@pytest.fixture(autouse=True)
def _installed():
  mp.install()
  try:
    yield
  finally:
    tf.keras.mixed_precision.set_global_policy("float32")
    mp.uninstall()


@pytest.mark.parametrize("case", CASES)
def test_load_model_restores_the_optimizer(case):
  with open(os.path.join(_FIXTURES, case + ".json")) as f:
    meta = json.load(f)
  assert not [n for n in meta["optimizer_weight_names"]
              if "loss_scale" in n or "good_steps" in n]
  model = tf.keras.models.load_model(os.path.join(_FIXTURES, case + ".h5"))
  opt = model.optimizer
  assert isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer)
  assert isinstance(opt.inner_optimizer, tf.keras.optimizers.legacy.Optimizer)
  assert int(opt.iterations) == int(meta["iterations"])
  assert float(opt.loss_scale) == float(meta["initial_scale"])
  for var in model.trainable_variables:
    name = var.name.split(":")[0]
    np.testing.assert_array_equal(var.numpy(), meta["weights"][name])
    for slot, value in meta["slots"][name].items():
      np.testing.assert_array_equal(opt.get_slot(var, slot).numpy(), value)
  got = model.predict(np.array(meta["probe_inputs"], np.float32), verbose=0)
  np.testing.assert_allclose(got, meta["predictions"], rtol=1e-2, atol=1e-2)
