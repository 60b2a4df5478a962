"""TF 2.4 checkpoints resume natively on the tf_keras target (legacy SGD)."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import tf_mixed_precision_compat as mp

_FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "legacy")


@pytest.fixture(autouse=True)
def _installed():
  mp.install()
  try:
    yield
  finally:
    mp.uninstall()


def test_tf24_fixed_sgd_checkpoint_restores_exactly():
  with open(os.path.join(_FIXTURES, "ckpt_tf24_seq_sgd_fixed.json")) as f:
    meta = json.load(f)
  model = tf.keras.models.model_from_json(meta["model_json"])
  opt = tf.keras.mixed_precision.LossScaleOptimizer(
      tf.keras.optimizers.legacy.SGD(0.05, momentum=0.9), dynamic=False,
      initial_scale=32)
  ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
  status = ckpt.restore(os.path.join(_FIXTURES, meta["location"]))
  status.assert_existing_objects_matched()
  # The optimizer's variables are created on first use, then restored.
  assert int(opt.iterations) == meta["iterations"]
  opt._create_all_weights(model.trainable_variables)  # noqa: SLF001
  status.assert_consumed()
  weights = meta["weights"]
  slots = meta["slots"]
  for var in model.trainable_variables:
    name = var.name.split(":")[0]
    np.testing.assert_array_equal(var.numpy(), weights[name])
    np.testing.assert_array_equal(
        opt.get_slot(var, "momentum").numpy(), slots[name]["momentum"])
