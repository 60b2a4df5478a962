"""Deserialization safety: configs never import or build classes we do not know.

A module is written to disk and put on sys.path whose import creates a marker
file and whose class creates another when instantiated. Configs (and JSON
files) naming that module and class go through every entry point that turns
configs into objects: loss_scale.deserialize / get, LossScaleOptimizer(V1)
.from_config (TF 2.4, TF 2.3 and Keras 3 forms of the inner optimizer),
keras.optimizers.deserialize with our registered classes, Policy/PolicyV1
deserialization and model configs/JSON with such a layer dtype. Each is
refused with an error, the module is not in sys.modules, and no marker file
exists. A control test imports the module directly and sees both markers, so
their absence means something.
"""

import json
import sys
import uuid

import keras
import tensorflow as tf
import pytest

import tf_mixed_precision_compat as mp
from tf_mixed_precision_compat import legacy
from tf_mixed_precision_compat import policy as policy_module
from tf_mixed_precision_compat.optimizers import _keras2_config
from tests import testing

_EVIL_SOURCE = '''
import os
open(os.path.join({where!r}, "imported"), "w").close()

class Evil:
  def __init__(self, *args, **kwargs):
    open(os.path.join({where!r}, "instantiated"), "w").close()

  @classmethod
  def from_config(cls, config, custom_objects=None):
    return cls()
'''


class EvilModule:
  """A uniquely named module on sys.path that leaves marker files."""

  def __init__(self, tmp_path, monkeypatch):
    self.name = f"evil_{uuid.uuid4().hex}"
    self.dir = tmp_path
    (tmp_path / f"{self.name}.py").write_text(
        _EVIL_SOURCE.format(where=str(tmp_path)))
    monkeypatch.syspath_prepend(str(tmp_path))

  def config(self, **config):
    return {"module": self.name, "class_name": "Evil", "config": config,
            "registered_name": "Evil"}

  def dotted(self, **config):
    """The TF 2.x form: no "module", a dotted class name."""
    return {"class_name": f"{self.name}.Evil", "config": config}

  def markers(self):
    return sorted(p for p in ("imported", "instantiated")
                  if (self.dir / p).exists())

  def assert_untouched(self):
    assert self.name not in sys.modules
    assert not self.markers()


@pytest.fixture
def evil(tmp_path, monkeypatch):
  module = EvilModule(tmp_path, monkeypatch)
  yield module
  sys.modules.pop(module.name, None)


def _lso_config(inner):
  config = mp.LossScaleOptimizer(keras.optimizers.SGD()).get_config()
  config["inner_optimizer"] = inner
  return config


def _model_config(dtype):
  return {
      "class_name": "Sequential",
      "config": {
          "name": "s",
          "layers": [{
              "class_name": "InputLayer",
              "config": {"batch_input_shape": [None, 3], "dtype": "float32",
                         "name": "in"}
          }, {
              "class_name": "Dense",
              "config": {"name": "d", "units": 2, "dtype": dtype}
          }]
      }
  }


ENTRY_POINTS = {
    "loss_scale_deserialize":
        lambda e: mp.deserialize(e.config()),
    "loss_scale_deserialize_dotted":
        lambda e: mp.deserialize(e.dotted()),
    "loss_scale_get":
        lambda e: mp.get(e.config()),
    "lso_from_config_keras3_inner":
        lambda e: mp.LossScaleOptimizer.from_config(_lso_config(e.config())),
    "lso_from_config_tf24_inner":
        lambda e: mp.LossScaleOptimizer.from_config(_lso_config(e.dotted())),
    "lso_from_config_tf23_loss_scale":
        lambda e: mp.LossScaleOptimizer.from_config({
            "optimizer": {"class_name": "SGD", "config": {}},
            "loss_scale": e.config(initial_loss_scale=2.)}),
    "lso_from_config_tf23_optimizer":
        lambda e: mp.LossScaleOptimizer.from_config({
            "optimizer": e.dotted(), "loss_scale": "dynamic"}),
    "lso_v1_from_config_tf23":
        lambda e: mp.LossScaleOptimizerV1.from_config({
            "optimizer": e.dotted(), "loss_scale": e.config()}),
    "lso_v1_constructor_loss_scale_dict":
        lambda e: mp.LossScaleOptimizerV1(keras.optimizers.SGD(), e.config()),
    "keras_optimizers_deserialize_our_class":
        lambda e: keras.optimizers.deserialize({
            "module": "tf_mixed_precision_compat.keras_optimizer",
            "class_name": "LossScaleOptimizer",
            "registered_name": "tf_mixed_precision_compat>LossScaleOptimizer",
            "config": _lso_config(e.config())}),
    "keras_optimizers_deserialize_our_v1_class":
        lambda e: keras.optimizers.deserialize({
            "module": "tf_mixed_precision_compat.keras_optimizer",
            "class_name": "LossScaleOptimizerV1",
            "registered_name":
                "tf_mixed_precision_compat>LossScaleOptimizerV1",
            "config": {"optimizer": e.dotted(), "loss_scale": "dynamic"}}),
    "policy_deserialize":
        lambda e: policy_module.deserialize(e.config(name="float32")),
    "policy_v1_from_config_loss_scale":
        lambda e: mp.PolicyV1.from_config(
            {"name": "mixed_float16", "loss_scale": e.config()}),
    "policy_v1_constructor_loss_scale":
        lambda e: mp.PolicyV1("mixed_float16", loss_scale=e.config()),
    "model_from_config_layer_dtype":
        lambda e: legacy.model_from_config(
            _model_config(e.config(name="float32"))),
    "model_from_json_layer_dtype":
        lambda e: legacy.model_from_json(
            json.dumps(_model_config(e.dotted(name="float32")))),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_unknown_class_is_refused_never_imported(evil, entry):
  with pytest.raises((ValueError, TypeError, KeyError, AttributeError)):
    ENTRY_POINTS[entry](evil)
  evil.assert_untouched()


def test_config_file_naming_unknown_class_is_refused(evil, tmp_path):
  path = tmp_path / "optimizer.json"
  path.write_text(json.dumps(_lso_config(evil.config())))
  with pytest.raises((ValueError, TypeError)):
    mp.LossScaleOptimizer.from_config(json.loads(path.read_text()))
  evil.assert_untouched()


def test_control_importing_the_module_leaves_both_markers(evil):
  module = __import__(evil.name)
  module.Evil()
  assert evil.markers() == ["imported", "instantiated"]


def test_allowed_classes_still_round_trip():
  lso = mp.LossScaleOptimizer(keras.optimizers.Adam(0.5), initial_scale=8.,
                              dynamic_growth_steps=7)
  again = keras.optimizers.deserialize(keras.optimizers.serialize(lso))
  assert type(again) is mp.LossScaleOptimizer
  assert again.get_config() == lso.get_config()
  assert mp.deserialize(mp.serialize(mp.DynamicLossScale(4.))).get_config() \
      == mp.DynamicLossScale(4.).get_config()
  assert policy_module.deserialize(
      {"class_name": "PolicyV1", "config": {"name": "mixed_float16",
                                            "loss_scale": None}}).name == \
      "mixed_float16"


# ------------------------------------------ malformed TF 2.x configs --
# How real TF 2.4.4 deserialized malformed old optimizer configs
# (tools/gen_malformed_optimizer_configs.py): what it refused is refused
# with its exception type (and its message where it raised at deserialize);
# what it accepted trains as it did; learning rates it refused only at the
# first step are refused on loading, with that step's exception type.


def _malformed_cases():
  with open(testing.fixture_path("keras_lso",
                                 "malformed_configs_tf24.json")) as f:
    record = json.load(f)
  return record


_MALFORMED = _malformed_cases()
# Where our message is our own (the exception type is still TF 2.4's).
_OWN_MESSAGES = ("LossScaleOptimizer/string_initial_scale",
                 "LossScaleOptimizerTF23/negative_loss_scale")


def _three_steps(optimizer, mode, strategy):
  with strategy.scope():
    var = tf.Variable([1.0])

  # Replicas' gradients are summed: each gives its share of TF's 1.
  grad = 1.0 / strategy.num_replicas_in_sync

  def step():
    optimizer.apply_gradients([(tf.constant([grad]), var)])

  for _ in range(3):
    if mode == "eager":
      step()
    elif mode == "function":
      tf.function(step)()
    else:
      strategy.run(tf.function(step))
  return float(var.numpy()[0])


def check_malformed_case(name, mode="eager", strategy=None):
  """Asserts that tf.keras.optimizers.deserialize matches TF 2.4.4 on `name`."""
  entry = _MALFORMED["cases"][name]
  want, use = entry["deserialize"], entry.get("use")
  config = json.loads(json.dumps(entry["config"]))
  if want["outcome"] == "raised" or use["outcome"] == "raised":
    expected = want if want["outcome"] == "raised" else use
    with pytest.raises(Exception) as info:
      optimizer = tf.keras.optimizers.deserialize(config)
      _three_steps(optimizer, mode, strategy or tf.distribute.get_strategy())
    assert type(info.value).__name__ == expected["type"], info.value
    if want["outcome"] == "raised" and name not in _OWN_MESSAGES:
      assert want["message"] in str(info.value)
    return
  strategy = strategy or tf.distribute.get_strategy()
  with strategy.scope():
    optimizer = tf.keras.optimizers.deserialize(config)
  value = _three_steps(optimizer, mode, strategy)
  assert value == pytest.approx(use["value"], rel=1e-4, abs=1e-5)


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize("name", sorted(_MALFORMED["cases"]))
def test_malformed_tf2x_optimizer_configs_as_tf24(name):
  check_malformed_case(name)


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize("mode", ["function", "mirrored"])
@pytest.mark.parametrize("name", ["SGD/negative_lr",
                                  "LossScaleOptimizer/Adam/negative_lr_key",
                                  "LossScaleOptimizer/RMSprop/negative_lr",
                                  "Adam/negative_decay"])
def test_malformed_configs_in_function_and_mirrored(name, mode,
                                                    mirrored_strategy):
  check_malformed_case(name, mode, mirrored_strategy if mode == "mirrored"
                       else None)


def test_keras2_argument_table_is_tf24s():
  assert _keras2_config.KERAS2_ARGUMENTS == {
      k: tuple(v) for k, v in _MALFORMED["keras2_arguments"].items()}
  assert sorted(_keras2_config.KERAS2_KWARGS) == \
      _MALFORMED["keras2_allowed_kwargs"]


@pytest.mark.usefixtures("installed")
def test_loss_scales_are_custom_objects_only_where_a_loss_scale_is_expected():
  assert "FixedLossScale" not in keras.saving.get_custom_objects()
  assert "DynamicLossScale" not in keras.saving.get_custom_objects()
  # Where a loss scale is expected, both still load.
  opt = tf.keras.optimizers.deserialize({
      "class_name": "LossScaleOptimizer", "config": {
          "optimizer": {"class_name": "SGD", "config": {"learning_rate": 0.1,
                                                        "decay": 0.0}},
          "loss_scale": {"class_name": "FixedLossScale",
                         "config": {"loss_scale_value": 5.0}}}})
  assert not opt.dynamic and float(opt.loss_scale) == 5.0
  policy = mp.PolicyV1.from_config({"name": "mixed_float16", "loss_scale": {
      "class_name": "DynamicLossScale", "config": {
          "initial_loss_scale": 8.0, "increment_period": 3,
          "multiplier": 2.0}}})
  assert float(policy.loss_scale()) == 8.0
