"""`targets`: the active target's adapter and what shared code asks of it."""

import numpy as np
import pytest
import tensorflow as tf

from tf_mixed_precision_compat import endpoints
from tf_mixed_precision_compat import targets


def test_current_adapter_is_the_active_target():
  adapter = targets.current()
  assert adapter.name == targets.active()
  assert adapter is targets.get(targets.active())
  assert targets.patched()[0] is targets.get(targets.KERAS3)
  assert targets.patched()[-1] is adapter
  # `tf.keras` resolves to the adapter's Keras root.
  assert adapter.keras_root().Model is tf.keras.Model


def test_recognises_tf_keras_objects_on_either_target():
  layer = tf.keras.layers.Dense(1)
  optimizer = tf.keras.optimizers.SGD()
  assert any(t.is_layer(layer) for t in targets.adapters())
  assert any(t.is_optimizer(optimizer) for t in targets.adapters())
  assert not any(t.is_layer(optimizer) for t in targets.adapters())
  assert not any(t.is_optimizer(np.float32(1)) for t in targets.adapters())


def test_global_policy_is_the_active_kerass():
  policy = targets.current().global_policy()
  assert policy.name == "float32"


def test_experimental_optimizer_is_the_grafted_one():
  spec = endpoints.lookup(
      "v2", "keras.mixed_precision.experimental.LossScaleOptimizer")
  adapter = targets.current()
  assert adapter.experimental_loss_scale_optimizer() is adapter.symbol_for(
      spec)


def test_unknown_target_name_is_refused():
  with pytest.raises(ValueError, match="'keras3', 'tf_keras'.*'keras2'"):
    targets.get("keras2")


def test_keras3_grafts_the_registered_objects_themselves():
  keras3 = targets.get(targets.KERAS3)
  specs = list(endpoints.all_specs())
  assert specs
  assert all(keras3.symbol_for(spec) is spec.symbol for spec in specs)
