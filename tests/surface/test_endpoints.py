"""The endpoint registry and the v1/v2 trees built from it."""

import importlib

import pytest

import tf_mixed_precision_compat as mp
from tf_mixed_precision_compat import endpoints

LOSS_SCALE_CLASSES = ("LossScale", "FixedLossScale", "DynamicLossScale")


@pytest.mark.parametrize("name", LOSS_SCALE_CLASSES)
def test_loss_scales_resolve_at_every_tf_path(name):
  symbol = getattr(mp, name)
  assert getattr(mp.v2.mixed_precision.experimental, name) is symbol
  assert getattr(mp.v2.train.experimental, name) is symbol
  assert getattr(mp.v1.mixed_precision, name) is symbol
  assert getattr(mp.v1.mixed_precision.experimental, name) is symbol
  assert getattr(mp.v1.train.experimental, name) is symbol
  # TF 2.4 dropped them from the non-experimental v2 namespace: never there.
  assert not hasattr(mp.v2.mixed_precision, name)


@pytest.mark.parametrize("name", LOSS_SCALE_CLASSES)
def test_v2_experimental_endpoints_are_deprecated_v1_stable_one_is_not(name):
  spec = endpoints.lookup("v2", f"mixed_precision.experimental.{name}")
  assert spec.symbol is getattr(mp, name)
  assert f"mixed_precision.experimental.{name}" in spec.deprecated
  assert f"train.experimental.{name}" in spec.deprecated
  assert f"mixed_precision.{name}" not in spec.deprecated


def test_warning_text_recorded_for_concrete_classes():
  spec = endpoints.lookup("v1", "mixed_precision.DynamicLossScale")
  assert "LossScaleOptimizer now has all the functionality of " \
         "DynamicLossScale" in spec.warning
  assert endpoints.lookup("v1", "mixed_precision.LossScale").warning is None


def test_namespaces_are_importable_modules():
  module = importlib.import_module(
      "tf_mixed_precision_compat.v2.mixed_precision.experimental")
  assert module.DynamicLossScale is mp.DynamicLossScale
  assert importlib.import_module("tf_mixed_precision_compat.v1") is mp.v1


def test_lookup_errors():
  with pytest.raises(KeyError, match="no v2 endpoint 'nope.Nothing'"):
    endpoints.lookup("v2", "nope.Nothing")
  with pytest.raises(ValueError, match=r"api_version must be one of"):
    endpoints.lookup("v3", "mixed_precision.LossScale")
  with pytest.raises(ValueError, match=r"api_version must be one of"):
    endpoints.namespace("v0")


def test_export_refuses_taken_paths_and_unexported_deprecations():
  with pytest.raises(ValueError, match="already registered"):
    endpoints.export("mixed_precision.experimental.LossScale")(object())
  with pytest.raises(ValueError, match="not exported"):
    endpoints.export("a.B", deprecated=("c.D",))
  # A refused registration leaves the tree as it was.
  assert mp.v2.mixed_precision.experimental.LossScale is mp.LossScale
  assert not hasattr(mp.v2, "a")


def test_all_is_sorted_and_names_only_public_symbols():
  assert mp.__all__ == sorted(mp.__all__)
  for name in mp.__all__:
    assert not name.startswith("_")
    assert hasattr(mp, name)
  registered = {spec.symbol.__name__ for spec in endpoints.all_specs()}
  assert set(LOSS_SCALE_CLASSES) <= registered
  # Every registered symbol is also reachable from the package top level.
  for spec in endpoints.all_specs():
    assert getattr(mp, spec.symbol.__name__) is spec.symbol, spec.symbol


def test_every_public_name_is_documented():
  undocumented = [name for name in mp.__all__
                  if not (getattr(mp, name).__doc__ or "").strip()]
  assert not undocumented
  # Public methods and properties of the registered classes too.
  for spec in endpoints.all_specs():
    if not isinstance(spec.symbol, type):
      continue
    for attr, value in vars(spec.symbol).items():
      if attr.startswith("_") or not callable(getattr(value, "fget", value)):
        continue
      doc = getattr(value, "__doc__", None)  # A property's own doc.
      inherited = any(
          (getattr(getattr(base, attr, None), "__doc__", None) or "").strip()
          for base in spec.symbol.__mro__[1:])
      assert (doc or "").strip() or inherited, f"{spec.symbol.__name__}.{attr}"
