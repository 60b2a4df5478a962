"""H5 models written by TF 2.3/2.4 load on the tf_keras target.

`tf.keras.models.load_model` restores the model, its loss-scale optimizer
(OptimizerV2 inside, as TF 2.4), iterations and slots. TF 2.3/2.4 wrote no
loss-scale variables into H5 files (asserted on the recorded weight names), so
the loss scale starts from the saved config's initial scale, as it did when
TF 2.4 loaded them.
"""

import json
import os
import shutil

import h5py
import numpy as np
import pytest
import tensorflow as tf

from tests.legacy import h5_resume_job
from tf_mixed_precision_compat.hooks.tf_keras import h5

_FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures",
                         "legacy")
CASES = ("h5_tf23_func_adam", "h5_tf24_func_sgd", "h5_tf24_seq_adam_exp")


pytestmark = pytest.mark.usefixtures("installed_then_float32")


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


# ------------------------------ a TF 2.4 job resuming from its H5 file --
# The CosmoFlow-like TF 2.4.4 job of tools/gen_h5_resume_job.py (see
# tests/legacy/test_h5_resume.py for the Keras 3 target).

_job = h5_resume_job.job


def _resume(model, meta, x, y):
  h5_resume_job.assert_history(h5_resume_job.resume(model, meta, x, y), meta)


@pytest.mark.parametrize("run_eagerly", [False, True])
def test_load_model_then_fit_trains_on_as_tf24(run_eagerly):
  meta, x, y, path = _job("mlperf_h5_tf24")
  model = tf.keras.models.load_model(path)
  assert int(model.optimizer.iterations) == meta["loaded_iterations"]
  for var in model.weights:
    np.testing.assert_array_equal(var.numpy(), meta["loaded_weights"][var.name])
  model.run_eagerly = run_eagerly
  _resume(model, meta, x, y)
  assert int(model.optimizer.iterations) == meta["loaded_iterations"] + 8


def test_old_lambda_bytecode_is_one_clear_error():
  _, _, _, path = _job("mlperf_lambda_tf24")
  with pytest.raises(ValueError) as info:
    tf.keras.models.load_model(path)
  for part in ("'scale_1p2'", "Python 3.8", "Keras 2.4.0", "load_weights",
               "Build the model in code", path):
    assert part in str(info.value)


def _built_in_code(optimizer=None):
  return h5_resume_job.built_in_code(
      optimizer, loss=tf.keras.losses.mean_squared_error)


@pytest.mark.parametrize("legacy_optimizer", [False, True])
def test_way_out_restores_weights_and_optimizer_state(legacy_optimizer):
  meta, x, y, path = _job("mlperf_lambda_tf24")
  tf.keras.mixed_precision.set_global_policy("mixed_float16")
  sgd = (tf.keras.optimizers.legacy.SGD if legacy_optimizer
         else tf.keras.optimizers.SGD)
  model = _built_in_code(tf.keras.mixed_precision.LossScaleOptimizer(
      sgd(learning_rate=0.05, momentum=0.9), initial_scale=2.0 ** 15,
      dynamic_growth_steps=3))
  model.load_weights(path)
  assert int(model.optimizer.iterations) == meta["loaded_iterations"]
  kernel = model.get_layer("fc1").kernel
  np.testing.assert_array_equal(kernel.numpy(),
                                meta["loaded_weights"]["fc1/kernel:0"])
  inner = model.optimizer.inner_optimizer
  variables = inner.variables
  if callable(variables):  # OptimizerV2
    variables = variables()
  slots = [v for v in variables
           if v is not inner.iterations and v.shape == kernel.shape]
  assert len(slots) == 1 and np.any(slots[0].numpy())
  _resume(model, meta, x, y)


def test_load_weights_leaves_another_optimizer_untouched(caplog):
  _, _, _, path = _job("mlperf_lambda_tf24")
  tf.keras.mixed_precision.set_global_policy("mixed_float16")
  model = _built_in_code(tf.keras.optimizers.Adam())
  model.load_weights(path)
  assert int(model.optimizer.iterations) == 0
  assert "optimizer state was not restored" in caplog.text


def test_load_weights_refuses_a_slot_of_another_dtype(tmp_path, caplog):
  _, _, _, path = _job("mlperf_lambda_tf24")
  copy = str(tmp_path / "model.h5")
  shutil.copy(path, copy)
  with h5py.File(copy, "r+") as f:  # One momentum slot saved as float16.
    names = []
    f["optimizer_weights"].visit(names.append)
    name = next(n for n in names if "momentum" in n and
                isinstance(f["optimizer_weights"][n], h5py.Dataset))
    value = f["optimizer_weights"][name][()]
    del f["optimizer_weights"][name]
    f["optimizer_weights"].create_dataset(name,
                                          data=value.astype(np.float16))
  tf.keras.mixed_precision.set_global_policy("mixed_float16")
  model = _built_in_code(tf.keras.mixed_precision.LossScaleOptimizer(
      tf.keras.optimizers.SGD(learning_rate=0.05, momentum=0.9)))
  model.load_weights(copy)
  # Nothing of the optimizer is assigned, and the log names the dtype.
  assert int(model.optimizer.iterations) == 0
  assert "optimizer state was not restored" in caplog.text
  assert "float16" in caplog.text


def test_way_out_under_mirrored_strategy(mirrored_strategy):
  meta, x, y, path = _job("mlperf_lambda_tf24")
  tf.keras.mixed_precision.set_global_policy("mixed_float16")
  with mirrored_strategy.scope():
    model = _built_in_code()
  model.load_weights(path)
  assert int(model.optimizer.iterations.numpy()) == meta["loaded_iterations"]
  history = model.fit(x, y, batch_size=meta["batch_size"],
                      epochs=meta["epochs"],
                      initial_epoch=meta["resume_epoch"], shuffle=False,
                      verbose=0).history
  assert np.all(np.isfinite(history["loss"]))
  steps = int(model.optimizer.iterations.numpy())
  assert steps == meta["loaded_iterations"] + 8


def test_every_tf24_metric_config_loads_as_a_working_metric(tmp_path):
  # The CosmoFlow-like job's file, its metrics replaced by every metric
  # class and function as TF 2.4.4 saved them.
  with open(os.path.join(_FIXTURES, "tf24_metric_configs.json")) as f:
    saved = json.load(f)["metrics"]
  assert len(saved) == 50
  _, _, _, source = _job("mlperf_h5_tf24")
  path = str(tmp_path / "checkpoint-2.h5")
  shutil.copy(source, path)
  with h5py.File(path, "r+") as f:
    training_config = json.loads(f.attrs["training_config"])
    training_config["metrics"] = [saved]
    f.attrs["training_config"] = json.dumps(training_config)
  model = tf.keras.models.load_model(path)
  metrics = tf.nest.flatten(model.compiled_metrics._user_metrics)  # pylint: disable=protected-access
  assert [m.name for m in metrics] == [c["config"]["name"] for c in saved]
  dense = np.zeros((4, 3), np.float32)
  dense[:, 1] = 1.0
  preds = np.array([[0.1, 0.7, 0.2]] * 4, np.float32)
  for metric in metrics:
    y_true = np.ones((4, 1), np.float32) if "sparse" in metric.name else dense
    metric.update_state(y_true, preds)
    assert np.all(np.isfinite(np.asarray(metric.result()))), metric.name


def test_a_metric_config_that_is_not_a_dict_is_left_to_tf_keras():
  # A corrupted file's MeanMetricWrapper config: the look-up of its metric
  # function passes it by instead of failing (tf_keras's own loading then
  # judges the file).
  config = {"metrics": [[
      {"class_name": "MeanMetricWrapper", "config": "garbage"},
      {"class_name": "MeanMetricWrapper", "config": ["fn", "x"]},
      {"class_name": "MeanMetricWrapper",
       "config": {"fn": "kl_divergence", "name": "kld"}}]]}
  found = h5._metric_functions(config)  # pylint: disable=protected-access
  assert list(found) == ["kl_divergence"]
