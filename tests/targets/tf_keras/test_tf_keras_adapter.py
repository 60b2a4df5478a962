"""The tf_keras adapter's endpoint table: complete, and loud when not."""

import pytest
import tensorflow as tf

import tf_mixed_precision_compat as mp
from tf_mixed_precision_compat import endpoints
from tf_mixed_precision_compat import policy
from tf_mixed_precision_compat import hooks
from tf_mixed_precision_compat import keras_target
from tf_mixed_precision_compat import tf_keras_classes


def _keras_specs():
  return [spec for spec in endpoints.all_specs()
          if any(path.startswith("keras.") for path in spec.v2 + spec.v1)]


def test_active_adapter_is_tf_keras():
  assert hooks.current() is hooks.get(keras_target.TF_KERAS)
  assert [t.name for t in hooks.patched()] == [keras_target.KERAS3,
                                                keras_target.TF_KERAS]


def test_every_keras_endpoint_has_its_own_tf_keras_object():
  adapter = hooks.current()
  specs = _keras_specs()
  assert len(specs) == len(tf_keras_classes.REPLACEMENTS)
  for spec in specs:
    replacement = adapter.symbol_for(spec)
    assert replacement is not spec.symbol, spec.v2 + spec.v1
    assert replacement.__module__.split(".")[0] in (
        "tf_keras", "tf_mixed_precision_compat"), replacement
    assert "keras3" not in replacement.__module__
  # The table's keys are exactly the registered Keras endpoint objects.
  assert {id(spec.symbol) for spec in specs} == {
      id(key) for key in tf_keras_classes.REPLACEMENTS}


def test_shared_endpoints_stay_themselves():
  adapter = hooks.current()
  shared = [spec for spec in endpoints.all_specs()
            if spec not in _keras_specs()]
  assert shared
  for spec in shared:
    assert adapter.symbol_for(spec) is spec.symbol


def test_a_keras_endpoint_missing_from_the_table_raises():

  def get_something():  # A Keras endpoint nobody mapped.
    return None

  spec = endpoints.EndpointSpec(
      get_something, ("keras.mixed_precision.experimental.get_something",), ())
  with pytest.raises(LookupError, match="no replacement for the Keras "
                     "endpoint .*get_something"):
    hooks.current().symbol_for(spec)


def test_install_refuses_a_missing_entry_and_changes_nothing(monkeypatch):
  monkeypatch.delitem(tf_keras_classes.REPLACEMENTS,
                      policy.get_layer_policy)
  with pytest.raises(LookupError, match="get_layer_policy"):
    mp.install()
  assert not mp.installed()
  assert not hasattr(tf, "mixed_precision")
