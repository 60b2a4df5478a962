"""TF 2.3/2.4 loss-scale optimizer configs load on the tf_keras target.

`tf.keras.optimizers.deserialize` (what `load_model` and `compile` use) reads
the configs real TF 2.3.4/2.4.4 wrote (tests/fixtures/keras_lso/) as TF 2.4
did: a loss-scale optimizer around an OptimizerV2 with the same loss scaling
and hyperparameters; a multiplier other than 2 is refused, as TF 2.4 did.
"""

import json
import os

import pytest
import tensorflow as tf


_FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures",
                         "keras_lso")


def _entries():
  for version in ("23", "24"):
    with open(os.path.join(_FIXTURES, f"configs_tf{version}.json")) as f:
      for name, entry in sorted(json.load(f).items()):
        if name != "tensorflow_version":
          yield pytest.param(entry, id=f"tf{version}-{name}")


pytestmark = pytest.mark.usefixtures("installed")


def _expected(config):
  """(dynamic, initial scale, growth steps, inner config) a config means."""
  if "loss_scale" in config:  # TF 2.3's layout.
    loss_scale = config["loss_scale"]
    if loss_scale["class_name"] == "FixedLossScale":
      scale = loss_scale["config"]["loss_scale_value"]
      return False, scale, None, config["optimizer"]["config"]
    ls_config = loss_scale["config"]
    return (True, ls_config["initial_loss_scale"],
            ls_config["increment_period"], config["optimizer"]["config"])
  steps = config["dynamic_growth_steps"] if config["dynamic"] else None
  return (config["dynamic"], config["initial_scale"], steps,
          config["inner_optimizer"]["config"])


@pytest.mark.parametrize("entry", _entries())
def test_deserialize_as_tf24(entry):
  config = entry["serialize"]["config"]
  loss_scale = config.get("loss_scale", {})
  if loss_scale.get("config", {}).get("multiplier", 2) != 2:
    with pytest.raises(ValueError, match="multiplier is not 2"):
      tf.keras.optimizers.deserialize(entry["serialize"])
    return
  opt = tf.keras.optimizers.deserialize(entry["serialize"])
  dynamic, scale, steps, inner = _expected(config)
  assert isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer)
  assert isinstance(opt.inner_optimizer, tf.keras.optimizers.legacy.Optimizer)
  assert opt.dynamic is dynamic
  assert float(opt.loss_scale) == scale
  if dynamic:
    assert opt.dynamic_growth_steps == steps
  got = opt.inner_optimizer.get_config()
  for key, value in inner.items():
    assert got[key] == pytest.approx(value), key


# ------------------------------------------ malformed TF 2.x configs --
# As on the Keras 3 target (tests/reliability/test_deserialization.py), from
# the same TF 2.4.4 record: tf_keras's OptimizerV2 refuses and defers what
# TF 2.4 did; a learning rate naming a loss scale is refused on loading.

with open(os.path.join(_FIXTURES, "malformed_configs_tf24.json")) as _f:
  _MALFORMED = json.load(_f)["cases"]
_OWN_MESSAGES = ("LossScaleOptimizer/string_initial_scale",
                 "LossScaleOptimizerTF23/negative_loss_scale",
                 "LossScaleOptimizerTF23/schedule_loss_scale")


def _three_steps(optimizer, mode):
  var = tf.Variable([1.0])

  def step():
    optimizer.apply_gradients([(tf.constant([1.0]), var)])

  for _ in range(3):
    if mode == "eager":
      step()
    else:
      tf.function(step)()
  return float(var.numpy()[0])


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("name", sorted(_MALFORMED))
def test_malformed_tf2x_optimizer_configs_as_tf24(name, mode):
  entry = _MALFORMED[name]
  want, use = entry["deserialize"], entry.get("use")
  if want["outcome"] == "raised" or use["outcome"] == "raised":
    expected = want if want["outcome"] == "raised" else use
    with pytest.raises(Exception) as info:
      _three_steps(tf.keras.optimizers.deserialize(entry["config"]), mode)
    assert type(info.value).__name__ == expected["type"], info.value
    if want["outcome"] == "raised" and name not in _OWN_MESSAGES:
      assert want["message"] in str(info.value)
    return
  value = _three_steps(tf.keras.optimizers.deserialize(entry["config"]), mode)
  assert value == pytest.approx(use["value"], rel=1e-4, abs=1e-5)


def test_loss_scales_are_not_global_custom_objects():
  import tf_keras  # pylint: disable=g-import-not-at-top
  assert "FixedLossScale" not in tf_keras.utils.get_custom_objects()
  with pytest.raises(ValueError, match="Unknown decay: FixedLossScale"):
    tf.keras.optimizers.get({"class_name": "SGD", "config": {
        "learning_rate": {"class_name": "FixedLossScale",
                          "config": {"loss_scale_value": 5.0}},
        "decay": 0.0}})
