"""A TF 2.4 job resumes from its whole-model H5 checkpoint (Keras 3 target).

The fixtures (tools/gen_h5_resume_job.py, real TF 2.4.4) are a CosmoFlow-like
job's `checkpoint-2.h5`: `mixed_float16`, a LossScaleOptimizer around SGD
with momentum, loss "mse", metrics by name, class and function. After
`install()`, the job's own `tf.keras.models.load_model(path)` then
`fit(initial_epoch=2)` trains on as it did under TF 2.4.4. The second job's
file holds a `Lambda` layer (Python 3.8 bytecode): loading it raises one
clear error, and its way out (build the model in code, compile, then
`load_weights` on the same file) restores weights and optimizer state and
trains on as TF 2.4.4 did.
"""

import base64
import json
import marshal
from unittest import mock

import h5py
import numpy as np
import pytest
import tensorflow as tf

from tests.legacy import h5_resume_job
from tests import testing
from tf_mixed_precision_compat.legacy import _read_h5
from tf_mixed_precision_compat.legacy import _training_config

K = tf.keras
_job = h5_resume_job.job
_resume = h5_resume_job.resume
_assert_history = h5_resume_job.assert_history
_built_in_code = h5_resume_job.built_in_code


@pytest.mark.usefixtures("installed")
def test_load_model_then_fit_trains_on_as_tf24():
  meta, x, y, path = _job("mlperf_h5_tf24")
  model = K.models.load_model(path)
  assert int(model.optimizer.iterations.numpy()) == meta["loaded_iterations"]
  checked = 0
  for layer in model.layers:
    for var in layer.weights:
      np.testing.assert_array_equal(
          var.numpy(), meta["loaded_weights"][f"{layer.name}/{var.name}:0"])
      checked += 1
  assert checked == 6
  _assert_history(_resume(model, meta, x, y), meta)
  steps = int(model.optimizer.iterations.numpy())
  assert steps == meta["loaded_iterations"] + 8


@pytest.mark.usefixtures("installed")
def test_load_model_then_fit_eagerly():
  meta, x, y, path = _job("mlperf_h5_tf24")
  model = K.models.load_model(path)
  model.run_eagerly = True
  _assert_history(_resume(model, meta, x, y), meta)


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize("safe_mode", [True, False])
def test_old_lambda_bytecode_is_one_clear_error(safe_mode):
  _, _, _, path = _job("mlperf_lambda_tf24")
  with h5py.File(path, "r") as f:
    layers = json.loads(f.attrs["model_config"])["config"]["layers"]
  code = base64.b64decode(layers[-1]["config"]["function"][0])
  with mock.patch("marshal.loads", wraps=marshal.loads) as loads:
    with pytest.raises(ValueError) as info:
      K.models.load_model(path, safe_mode=safe_mode)
  # Imports of .pyc files may unmarshal too; the Lambda's code never is.
  assert code.startswith(b"\xe3")
  assert not [c for c in loads.call_args_list if bytes(c.args[0]) == code]
  message = str(info.value)
  for part in ("'scale_1p2'", "Python 3.8", "Keras 2.4.0", "load_weights",
               "Build the model in code", path):
    assert part in message


@pytest.mark.usefixtures("installed")
def test_way_out_restores_weights_and_optimizer_state(tf_log):
  meta, x, y, path = _job("mlperf_lambda_tf24")
  K.mixed_precision.set_global_policy("mixed_float16")
  model = _built_in_code()
  model.load_weights(path)
  opt = model.optimizer
  assert int(opt.iterations.numpy()) == meta["loaded_iterations"]
  with h5py.File(path, "r") as f:
    group = f["optimizer_weights"]
    names = [n.decode() for n in group.attrs["weight_names"]]
    kernel_momentum = next(n for n in names if "fc1/kernel/momentum" in n)
    np.testing.assert_array_equal(
        opt.get_slot(model.get_layer("fc1").kernel, "momentum").numpy(),
        group[kernel_momentum][()])
  np.testing.assert_array_equal(
      model.get_layer("fc1").kernel.numpy(),
      meta["loaded_weights"]["fc1/kernel:0"])
  assert any("does not store the dynamic loss scale" in m for m in tf_log)
  _assert_history(_resume(model, meta, x, y), meta)


@pytest.mark.usefixtures("installed")
def test_way_out_under_mirrored_strategy(mirrored_strategy):
  meta, x, y, path = _job("mlperf_lambda_tf24")
  K.mixed_precision.set_global_policy("mixed_float16")
  with mirrored_strategy.scope():
    model = _built_in_code()
  model.load_weights(path)
  assert int(model.optimizer.iterations.numpy()) == meta["loaded_iterations"]
  history = _resume(model, meta, x, y)
  assert np.all(np.isfinite(history["loss"]))
  steps = int(model.optimizer.iterations.numpy())
  assert steps == meta["loaded_iterations"] + 8


@pytest.mark.usefixtures("installed")
def test_load_weights_leaves_another_optimizer_untouched(tf_log):
  _, _, _, path = _job("mlperf_lambda_tf24")
  K.mixed_precision.set_global_policy("mixed_float16")
  model = _built_in_code()
  model.compile(optimizer=K.optimizers.Adam(), loss="mse")
  model.load_weights(path)
  assert int(model.optimizer.iterations.numpy()) == 0
  assert all(not np.any(v.numpy()) for v in model.optimizer.variables
             if "momentum" in v.name or "velocity" in v.name)
  assert any("optimizer state was not restored" in m for m in tf_log)


def test_metric_functions_are_resolved_by_name():
  built = _training_config.metrics(
      [[{"class_name": "MeanMetricWrapper",
         "config": {"name": "acc", "dtype": "float32",
                    "fn": "sparse_categorical_accuracy"}},
        {"class_name": "MeanMetricWrapper",
         "config": {"name": "cos", "dtype": "float32",
                    "fn": "cosine_similarity"}},
        {"class_name": "AUC", "config": {"name": "auc", "dtype": "float32",
                                         "num_thresholds": 20}},
        "mae"]], "f.h5", num_outputs=1)
  acc, cos, auc, mae = built
  assert acc.name == "acc"
  acc.update_state(np.array([1, 0]), np.array([[0.1, 0.9], [0.2, 0.8]]))
  assert float(acc.result()) == 0.5
  cos.update_state(np.array([[1.0, 0.0]]), np.array([[1.0, 0.0]]))
  assert float(cos.result()) == pytest.approx(1.0)
  assert type(auc).__name__ == "AUC" and auc.num_thresholds == 20
  assert mae == "mae"


@pytest.mark.parametrize("config,match", [
    ({"class_name": "MeanMetricWrapper",
      "config": {"name": "mine", "fn": "my_metric"}}, "'my_metric'"),
    ({"class_name": "MeanMetricWrapper", "config": {"name": "mine"}},
     "not a function"),
    ({"class_name": "NoSuchMetric", "config": {"name": "x"}},
     "'NoSuchMetric'"),
])
def test_unknown_metric_functions_and_classes_are_refused(config, match):
  with pytest.raises(ValueError, match=match) as info:
    _training_config.metrics([config], "f.h5", num_outputs=1)
  assert "'f.h5'" in str(info.value)


def test_custom_metric_function_comes_from_custom_objects():
  def my_metric(y_true, y_pred):
    return y_true - y_pred
  (metric,) = _training_config.metrics(
      [{"class_name": "MeanMetricWrapper",
        "config": {"name": "mine", "fn": "my_metric"}}], "f.h5", 1,
      custom_objects={"my_metric": my_metric})
  metric.update_state(np.array([3.0]), np.array([1.0]))
  assert float(metric.result()) == 2.0


def test_loss_classes_with_tf2x_reduction():
  loss = _training_config.losses(
      {"class_name": "MeanSquaredError",
       "config": {"reduction": "auto", "name": "mean_squared_error"}}, "f.h5")
  assert loss.reduction == "sum_over_batch_size"
  assert float(loss(np.array([[1.0]]), np.array([[3.0]]))) == 4.0


def _lambda_config(code, name="lam"):
  return {"class_name": "Functional", "config": {"layers": [
      {"class_name": "Lambda", "config": {
          "name": name, "function_type": "lambda",
          "function": [base64.b64encode(code).decode("ascii"), None, None],
          "output_shape_type": "raw", "output_shape": None}}]}}


def test_bytecode_of_this_python_passes_the_check():
  code = marshal.dumps((lambda t: t * 2).__code__)
  _read_h5.check_lambda_bytecode(_lambda_config(code), "2.15.0", "f.h5")
  _read_h5.check_lambda_bytecode(_lambda_config(code), None, "f.h5")


def test_writer_python_is_told_from_the_code_layout():
  _, _, _, path = _job("mlperf_lambda_tf24")
  with h5py.File(path, "r") as f:
    config = json.loads(f.attrs["model_config"])
  with pytest.raises(ValueError, match=r"Python 3\.8-3\.10 \(Keras None\)"):
    _read_h5.check_lambda_bytecode(config, None, "f.h5")
  # Keras 2.4.0 (TF 2.3/2.4) ran on Python 3.5-3.8: that layout is 3.8's.
  with pytest.raises(ValueError, match=r"Python 3\.8 \(Keras 2\.4\.0\)"):
    _read_h5.check_lambda_bytecode(config, "2.4.0", "f.h5")


def _labels_for(metric):
  """Dense labels, or sparse ones for a metric that takes class indices."""
  dense = np.zeros((4, 3), np.float32)
  dense[:, 1] = 1.0
  sparse = np.ones((4, 1), np.float32)
  preds = np.array([[0.1, 0.7, 0.2]] * 4, np.float32)
  return (sparse if "sparse" in metric.name else dense), preds


def test_every_tf24_metric_config_rebuilds_as_a_working_metric():
  with open(testing.fixture_path("legacy", "tf24_metric_configs.json")) as f:
    saved = json.load(f)["metrics"]
  assert len(saved) == 50
  for config in saved:
    (metric,) = _training_config.metrics([[config]], "f.h5", num_outputs=1)
    assert metric.name == config["config"]["name"]
    y_true, y_pred = _labels_for(metric)
    metric.update_state(y_true, y_pred)
    assert np.all(np.isfinite(np.asarray(metric.result()))), metric.name
