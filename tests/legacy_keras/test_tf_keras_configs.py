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

import tf_mixed_precision_compat as mp

_FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures",
                         "keras_lso")


def _entries():
  for version in ("23", "24"):
    with open(os.path.join(_FIXTURES, f"configs_tf{version}.json")) as f:
      for name, entry in sorted(json.load(f).items()):
        if name != "tensorflow_version":
          yield pytest.param(entry, id=f"tf{version}-{name}")


@pytest.fixture(autouse=True)
def _installed():
  mp.install()
  try:
    yield
  finally:
    mp.uninstall()


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
