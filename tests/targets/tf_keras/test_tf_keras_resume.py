"""TF 2.2/2.3/2.4 checkpoints resume exactly on the tf_keras target.

With tf_keras's OptimizerV2 classes (`tf.keras.optimizers.legacy.*`) the
checkpoint layout is TF 2.4's own: the job's `tf.train.Checkpoint` /
`CheckpointManager` code restores weights, slots, iterations, the loss scale
and its counter with nothing left over. The fixtures are those of the Keras 3
target's legacy tests (tools/gen_legacy_checkpoints.py).
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf


_FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures",
                         "legacy")
# The subclassed-model fixtures need the model's Python class; the Keras 3
# target's tests cover them.
CASES = ("tf22_func_adam_dynamic", "tf22_seq_sgd_dynamic",
         "tf23_func_sgd_fixed", "tf23_seq_adam_dynamic",
         "tf24_func_adam_dynamic", "tf24_seq_sgd_fixed")


pytestmark = pytest.mark.usefixtures("installed")


def _optimizer(meta):
  inner = getattr(tf.keras.optimizers.legacy, type(
      tf.keras.optimizers.get(meta["optimizer"])).__name__).from_config(
          meta["inner_config"])
  dynamic = meta["loss_scale_kind"] == "dynamic"
  if meta["lso_api"] == "v2":
    kwargs = {"dynamic_growth_steps": meta["growth_steps"]} if dynamic else {}
    return tf.keras.mixed_precision.LossScaleOptimizer(
        inner, dynamic=dynamic, initial_scale=meta["initial_scale"], **kwargs)
  loss_scale = (tf.mixed_precision.experimental.DynamicLossScale(
      meta["initial_scale"], meta["growth_steps"]) if dynamic
                else meta["initial_scale"])
  return tf.keras.mixed_precision.experimental.LossScaleOptimizer(
      inner, loss_scale)


@pytest.mark.parametrize("case", CASES)
def test_checkpoint_resumes_exactly(case):
  with open(os.path.join(_FIXTURES, f"ckpt_{case}.json")) as f:
    meta = json.load(f)
  model = tf.keras.models.model_from_json(meta["model_json"])
  opt = _optimizer(meta)
  ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
  if meta["saver"] == "manager":
    manager = tf.train.CheckpointManager(
        ckpt, os.path.join(_FIXTURES, meta["location"]), max_to_keep=3)
    assert manager.latest_checkpoint is not None
    status = ckpt.restore(manager.latest_checkpoint)
  else:
    status = ckpt.restore(os.path.join(_FIXTURES, meta["location"]))
  status.assert_existing_objects_matched()
  # The optimizer's variables are created on first use, then restored.
  assert int(opt.iterations) == meta["iterations"]
  opt._create_all_weights(model.trainable_variables)  # noqa: SLF001
  status.assert_consumed()
  assert float(opt.loss_scale) == meta["loss_scale"]
  if meta["counter"] is not None:
    assert int(opt.dynamic_counter) == meta["counter"]
  for var in model.trainable_variables:
    name = var.name.split(":")[0]
    np.testing.assert_array_equal(var.numpy(), meta["weights"][name])
    for slot, value in meta["slots"][name].items():
      np.testing.assert_array_equal(opt.get_slot(var, slot).numpy(), value)


def test_tf22_resume_then_save_writes_tf24_layout(tmp_path):
  with open(os.path.join(_FIXTURES, "ckpt_tf22_func_adam_dynamic.json")) as f:
    meta = json.load(f)
  model = tf.keras.models.model_from_json(meta["model_json"])
  opt = _optimizer(meta)
  ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
  ckpt.restore(os.path.join(_FIXTURES, meta["location"]))
  opt._create_all_weights(model.trainable_variables)  # noqa: SLF001
  path = ckpt.save(str(tmp_path / "ckpt"))
  names = [name for name, _ in tf.train.list_variables(path)]
  assert "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE" in names
  assert not [name for name in names if "base_optimizer" in name]
  assert tf.train.load_variable(
      path, "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE") == meta["iterations"]
