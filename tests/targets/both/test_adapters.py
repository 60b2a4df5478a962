"""`keras_target` (which Keras, which objects) and `hooks`' adapters."""

import numpy as np
import pytest
import tensorflow as tf

from tf_mixed_precision_compat import endpoints
from tf_mixed_precision_compat import graph_rewrite
from tf_mixed_precision_compat import hooks
from tf_mixed_precision_compat import keras_target


def test_current_adapter_is_the_active_target():
  adapter = hooks.current()
  assert adapter.name == keras_target.active()
  assert adapter is hooks.get(keras_target.active())
  assert hooks.patched()[0] is hooks.get(keras_target.KERAS3)
  assert hooks.patched()[-1] is adapter
  # `tf.keras` resolves to the adapter's Keras root.
  assert adapter.keras_root().Model is tf.keras.Model


def test_recognises_tf_keras_objects_on_either_target():
  layer = tf.keras.layers.Dense(1)
  optimizer = tf.keras.optimizers.SGD()
  assert keras_target.is_layer(layer)
  assert keras_target.is_optimizer(optimizer)
  assert not keras_target.is_layer(optimizer)
  assert not keras_target.is_optimizer(np.float32(1))


def test_global_policies_start_with_keras3s_then_the_active_kerass():
  policies = keras_target.global_policies()
  assert policies[0].name == "float32"
  assert tf.keras.mixed_precision.global_policy().name in [
      p.name for p in policies]


def test_loss_scale_optimizer_classes_include_the_active_kerass():
  classes = keras_target.loss_scale_optimizer_classes()
  wrapper = tf.keras.mixed_precision.LossScaleOptimizer(
      tf.keras.optimizers.SGD())
  assert any(isinstance(wrapper, cls) for cls in classes)


def test_experimental_optimizer_is_the_grafted_one():
  spec = endpoints.lookup(
      "v2", "keras.mixed_precision.experimental.LossScaleOptimizer")
  # pylint: disable-next=protected-access
  assert graph_rewrite._keras_loss_scale_optimizer() is (
      hooks.current().symbol_for(spec))


@pytest.mark.parametrize("lookup", [hooks.get, keras_target.package_name])
def test_unknown_target_name_is_refused(lookup):
  with pytest.raises(ValueError, match="'keras3', 'tf_keras'.*'keras2'"):
    lookup("keras2")


def test_keras3_grafts_the_registered_objects_themselves():
  keras3 = hooks.get(keras_target.KERAS3)
  specs = list(endpoints.all_specs())
  assert specs
  assert all(keras3.symbol_for(spec) is spec.symbol for spec in specs)
