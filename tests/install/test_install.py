"""install() / uninstall(): every endpoint resolves, everything comes back."""

import importlib
import subprocess
import tempfile
import sys
import textwrap
import threading

import keras
import pytest
import tensorflow as tf

import tf_mixed_precision_compat as mp
from tf_mixed_precision_compat import endpoints

# The module (the package's `install` attribute is the function).
install_module = importlib.import_module("tf_mixed_precision_compat.install")

_LEGACY_NAMES = ("Policy", "PolicyV1", "LossScaleOptimizer",
                 "LossScaleOptimizerV1")
# Resolved only where a config expects a loss scale (TF 2.4 registered them
# nowhere): a learning rate naming one is refused.
_LOSS_SCALE_NAMES = ("FixedLossScale", "DynamicLossScale")


def _resolve(root, path):
  node = root
  for part in path.split("."):
    node = getattr(node, part)
  return node


def _namespaces():
  """Every namespace install() may touch, by a readable name."""
  return {
      "tf.train": tf.train,
      "tf.train.experimental": tf.train.experimental,
      "tf.compat.v1.train": tf.compat.v1.train,
      "tf.compat.v1.train.experimental": tf.compat.v1.train.experimental,
      "tf.compat.v1.mixed_precision": tf.compat.v1.mixed_precision,
      "tf.compat.v1.mixed_precision.experimental":
          tf.compat.v1.mixed_precision.experimental,
      "tf.keras.mixed_precision": tf.keras.mixed_precision,
      "tf.compat.v1.keras.mixed_precision": tf.compat.v1.keras.mixed_precision,
      "keras.mixed_precision": keras.mixed_precision,
  }


def _snapshot():
  """What a user can observe of the namespaces install() touches."""
  snap = {}
  for label, ns in _namespaces().items():
    snap[label] = {name: getattr(ns, name) for name in dir(ns)}
    snap[label + ".__all__"] = list(getattr(ns, "__all__", []))
  # The root and tf.compat.v1 are huge and lazy: compare their names and the
  # entries install() may replace.
  for label, ns in (("tf", tf), ("tf.compat.v1", tf.compat.v1)):
    snap[label + " names"] = sorted(dir(ns))
    snap[label + " entries"] = {
        name: getattr(ns, name, None)
        for name in ("mixed_precision", "train", "keras", "compat")}
  snap["sys.modules"] = dict(sys.modules)
  snap["custom_objects"] = dict(keras.saving.get_custom_objects())
  snap["Model.compile"] = keras.Model.compile
  snap["compile integration"] = install_module.compile_integration_enabled()
  return snap


def _assert_same(before, after):
  assert before.keys() == after.keys()
  for key in before:
    if key == "sys.modules":
      # Other code may import modules meanwhile; ours must be gone and the
      # entries that existed must be the same objects.
      new = set(after[key]) - set(before[key])
      assert not [m for m in new if "mixed_precision" in m], new
      for name, module in before[key].items():
        assert after[key].get(name) is module, name
    else:
      assert before[key] == after[key], key
      if isinstance(before[key], dict):
        for name, value in before[key].items():
          assert after[key][name] is value, (key, name)


def test_plain_import_patches_nothing_and_auto_installs():
  script = textwrap.dedent("""
      import sys
      import keras
      import tensorflow as tf
      from tensorflow import keras as held  # a lazy loader, as users held it
      tf_keras_lso = tf.keras.mixed_precision.LossScaleOptimizer
      v1_dls = tf.compat.v1.mixed_precision.DynamicLossScale
      compile_fn = keras.Model.compile

      import tf_mixed_precision_compat
      assert not tf_mixed_precision_compat.installed()
      assert not hasattr(tf, "mixed_precision")
      assert not hasattr(tf.keras.mixed_precision, "experimental")
      assert not hasattr(tf.train.experimental, "DynamicLossScale")
      assert tf.keras.mixed_precision.LossScaleOptimizer is tf_keras_lso
      assert tf.compat.v1.mixed_precision.DynamicLossScale is v1_dls
      assert keras.Model.compile is compile_fn
      assert "Policy" not in keras.saving.get_custom_objects()
      assert not [m for m in sys.modules if m.endswith(
          "mixed_precision.experimental") and m.startswith(
              ("keras", "tensorflow.keras"))]

      # Loaded as its own module by the import statement (TF puts Keras'
      # directory on tensorflow.__path__).
      import tensorflow.keras.mixed_precision as imported
      assert imported is not keras.mixed_precision
      assert tf.keras.mixed_precision is imported  # TF rebinds tf.keras.

      import tf_mixed_precision_compat.auto
      assert tf_mixed_precision_compat.installed()
      from tensorflow.keras.mixed_precision import experimental as exp
      assert exp.LossScaleOptimizer is (
          tf_mixed_precision_compat.LossScaleOptimizerV1)
      assert held.mixed_precision.experimental.set_policy is (
          tf_mixed_precision_compat.set_policy)
      assert keras.mixed_precision.experimental is not None
      assert imported.LossScaleOptimizer is (
          tf_mixed_precision_compat.LossScaleOptimizer)
      assert tf.keras.mixed_precision.LossScaleOptimizer is (
          tf_mixed_precision_compat.LossScaleOptimizer)

      tf_mixed_precision_compat.uninstall()
      assert not hasattr(imported, "experimental")
      assert imported.LossScaleOptimizer is tf_keras_lso
      assert not hasattr(held.mixed_precision, "experimental")
      assert not hasattr(keras.mixed_precision, "experimental")
      try:
        from tensorflow.keras.mixed_precision import experimental
      except ImportError:
        pass
      else:
        raise AssertionError("experimental still importable")
      print("OK")
  """)
  result = subprocess.run([sys.executable, "-c", script], capture_output=True,
                          text=True, timeout=900)  # A hang guard only.
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip().endswith("OK")


def test_every_registered_endpoint_resolves(installed):
  del installed
  count = 0
  for spec in endpoints.all_specs():
    for path in spec.v2:
      assert _resolve(tf, path) is spec.symbol, path
      count += 1
    for path in spec.v1:
      assert _resolve(tf.compat.v1, path) is spec.symbol, path
      count += 1
  assert count > 30
  # The examples named in the issue.
  assert (tf.mixed_precision.experimental.DynamicLossScale
          is mp.DynamicLossScale)
  assert tf.train.experimental.FixedLossScale is mp.FixedLossScale
  assert (tf.keras.mixed_precision.experimental.LossScaleOptimizer
          is mp.LossScaleOptimizerV1)
  assert tf.keras.mixed_precision.LossScaleOptimizer is mp.LossScaleOptimizer
  assert hasattr(tf.keras.mixed_precision.LossScaleOptimizer,
                 "get_scaled_loss")
  assert (tf.compat.v1.train.experimental.MixedPrecisionLossScaleOptimizer
          is mp.MixedPrecisionLossScaleOptimizer)
  assert tf.compat.v1.mixed_precision.DynamicLossScale is mp.DynamicLossScale


def test_from_import_forms_of_tf23_code(installed):
  del installed
  # pylint: disable=g-import-not-at-top
  from tensorflow.keras.mixed_precision import experimental as mixed_precision
  import tensorflow.keras.mixed_precision.experimental as exp
  from tensorflow.mixed_precision.experimental import DynamicLossScale
  # pylint: enable=g-import-not-at-top
  assert mixed_precision is exp
  assert mixed_precision.LossScaleOptimizer is mp.LossScaleOptimizerV1
  assert mixed_precision.Policy is mp.PolicyV1
  assert DynamicLossScale is mp.DynamicLossScale


def test_created_namespaces_say_install_made_them(installed):
  del installed
  # install() grafts through `endpoints.graft` with its own namespace text.
  assert tf.mixed_precision.__doc__ == (
      "TensorFlow 2.3/2.4 `mixed_precision` namespace, re-created by "
      "tf_mixed_precision_compat.install().")
  assert sys.modules["tensorflow.mixed_precision"] is tf.mixed_precision
  assert endpoints.namespace("v2").mixed_precision.__doc__ == (
      "Mirror of the TensorFlow `mixed_precision` namespace.")


def test_keras_3_canonical_paths_stay_keras_3s(installed):
  del installed
  # tf.keras.mixed_precision IS keras.mixed_precision on TF 2.21, so the
  # endpoints show there too (documented); Keras 3's own classes stay
  # reachable under their canonical paths.
  assert tf.keras.mixed_precision is keras.mixed_precision
  assert keras.mixed_precision.LossScaleOptimizer is mp.LossScaleOptimizer
  assert keras.optimizers.LossScaleOptimizer.__module__.startswith("keras.")
  assert keras.DTypePolicy.__module__.startswith("keras.")
  assert keras.config.set_dtype_policy.__module__.startswith("keras.")
  # Ours still is a Keras 3 LossScaleOptimizer, so Keras' isinstance checks
  # (and compile's wrapping decision) hold.
  assert issubclass(mp.LossScaleOptimizer, keras.optimizers.LossScaleOptimizer)


def test_uninstall_restores_exactly_what_was_there():
  custom_objects = keras.saving.get_custom_objects()
  user_policy = type("UserPolicy", (), {})
  custom_objects["Policy"] = user_policy  # A user's own entry survives.
  try:
    before = _snapshot()
    mp.install()
    mp.install()  # idempotent
    assert mp.installed()
    during = _snapshot()
    assert during != before
    assert custom_objects["Policy"] is mp.Policy
    mp.uninstall()
    mp.uninstall()  # idempotent
    assert not mp.installed()
    _assert_same(before, _snapshot())
    assert custom_objects["Policy"] is user_policy
    # And once more: a second cycle is as complete as the first.
    mp.install()
    assert tf.keras.mixed_precision.experimental.Policy is mp.PolicyV1
    mp.uninstall()
    _assert_same(before, _snapshot())
  finally:
    mp.uninstall()
    custom_objects.pop("Policy", None)


def test_replaced_endpoints_come_back():
  keras_lso = tf.keras.mixed_precision.LossScaleOptimizer
  tf_dls = tf.compat.v1.mixed_precision.DynamicLossScale
  keras_policy = tf.keras.mixed_precision.Policy
  mp.install()
  try:
    assert tf.keras.mixed_precision.LossScaleOptimizer is not keras_lso
    assert tf.compat.v1.mixed_precision.DynamicLossScale is not tf_dls
    assert tf.keras.mixed_precision.Policy is mp.Policy
  finally:
    mp.uninstall()
  assert tf.keras.mixed_precision.LossScaleOptimizer is keras_lso
  assert tf.compat.v1.mixed_precision.DynamicLossScale is tf_dls
  assert tf.keras.mixed_precision.Policy is keras_policy
  assert not hasattr(tf, "mixed_precision")
  assert not hasattr(tf.train.experimental, "LossScale")


def test_legacy_configs_deserialize_only_while_installed():
  configs = {
      "Policy": {"class_name": "Policy",
                 "config": {"name": "mixed_float16"}},
      "PolicyV1": {"class_name": "PolicyV1",
                   "config": {"name": "mixed_float16", "loss_scale": None}},
      "LossScaleOptimizer": {"class_name": "LossScaleOptimizer", "config": {
          "inner_optimizer": {"class_name": "SGD", "config": {
              "name": "SGD", "learning_rate": 0.5, "decay": 0.0,
              "momentum": 0.0, "nesterov": False}},
          "dynamic": True, "initial_scale": 64.0, "dynamic_growth_steps": 5}},
      "LossScaleOptimizerV1": {"class_name": "LossScaleOptimizerV1", "config": {
          "optimizer": {"class_name": "SGD", "config": {
              "name": "SGD", "learning_rate": 0.5, "decay": 0.0,
              "momentum": 0.0, "nesterov": False}},
          "loss_scale": {"class_name": "FixedLossScale",
                         "config": {"loss_scale_value": 8.0}}}},
  }
  assert sorted(configs) == sorted(_LEGACY_NAMES)
  for config in configs.values():
    with pytest.raises(TypeError, match="Could not locate class"):
      keras.saving.deserialize_keras_object(config)
  mp.install()
  try:
    objects = {name: keras.saving.deserialize_keras_object(config)
               for name, config in configs.items()}
  finally:
    mp.uninstall()
  assert objects["Policy"] == mp.Policy("mixed_float16")
  assert type(objects["PolicyV1"]) is mp.Policy  # As TF 2.4 loaded it.
  lso = objects["LossScaleOptimizer"]
  assert type(lso) is mp.LossScaleOptimizer
  assert (lso.initial_scale, lso.dynamic_growth_steps) == (64., 5)
  assert float(lso.learning_rate) == 0.5
  lso_v1 = objects["LossScaleOptimizerV1"]
  assert type(lso_v1) is mp.LossScaleOptimizer  # As TF 2.4.4 loaded it.
  assert not lso_v1.dynamic and lso_v1.initial_scale == 8.
  for config in configs.values():
    with pytest.raises(TypeError):
      keras.saving.deserialize_keras_object(config)


def test_loss_scales_are_not_global_custom_objects(installed):
  del installed
  for name in _LOSS_SCALE_NAMES:
    assert name not in keras.saving.get_custom_objects()
    with pytest.raises(TypeError, match="Could not locate class"):
      keras.saving.deserialize_keras_object(
          {"class_name": name, "config": {}})


def test_keras_3_configs_still_load_as_keras_3_while_installed(installed):
  del installed
  opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))
  restored = keras.saving.deserialize_keras_object(
      keras.saving.serialize_keras_object(opt))
  assert type(restored) is keras.optimizers.LossScaleOptimizer
  dtype_policy = keras.saving.deserialize_keras_object(
      keras.saving.serialize_keras_object(keras.DTypePolicy("mixed_float16")))
  assert type(dtype_policy) is keras.DTypePolicy


def test_compile_integration_follows_install():
  assert not install_module.compile_integration_enabled()
  mp.install()
  try:
    assert install_module.compile_integration_enabled()
    with mp.policy_scope(mp.PolicyV1("mixed_float16", loss_scale=16)):
      model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.1), "mse")
    assert type(model.optimizer) is mp.LossScaleOptimizerV1
    assert float(model.optimizer.loss_scale) == 16.
  finally:
    mp.uninstall()
  assert not install_module.compile_integration_enabled()


def test_compile_integration_enabled_before_install_stays():
  install_module.enable_compile_integration()
  try:
    patched = keras.Model.compile
    mp.install()
    mp.uninstall()
    assert install_module.compile_integration_enabled()
    assert keras.Model.compile is patched
  finally:
    install_module.disable_compile_integration()


def test_compile_integration_disabled_while_installed():
  original = keras.Model.compile
  mp.install()
  try:
    assert keras.Model.compile is not original
    install_module.disable_compile_integration()
    assert not install_module.compile_integration_enabled()
    assert keras.Model.compile is original
  finally:
    mp.uninstall()
  assert not install_module.compile_integration_enabled()
  assert keras.Model.compile is original


def test_failed_install_changes_nothing(monkeypatch):
  before = _snapshot()

  def fail(*args):
    del args
    raise RuntimeError("boom")

  # One of the last changes install() makes: all before it are undone.
  monkeypatch.setattr(install_module, "_patch_compile", fail)
  with pytest.raises(RuntimeError, match="boom"):
    mp.install()
  assert not mp.installed()
  _assert_same(before, _snapshot())


def test_concurrent_install_and_uninstall_are_serialized():
  before = _snapshot()
  errors = []
  start = threading.Barrier(8)

  def worker(i):
    try:
      start.wait()
      for _ in range(5):
        mp.install()
        if i % 2:
          mp.uninstall()
    except Exception as e:  # pylint: disable=broad-except
      errors.append(e)

  threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors
  # Whatever interleaving happened, the state is one of the two complete ones.
  if mp.installed():
    assert tf.mixed_precision.experimental.LossScale is mp.LossScale
  mp.uninstall()
  _assert_same(before, _snapshot())
  mp.install()
  assert tf.mixed_precision.experimental.LossScale is mp.LossScale
  mp.uninstall()


def _train(strategy, use_function):
  """A float16 step through the installed TF 2.4 path; overflow then finite."""
  with strategy.scope():
    var = tf.Variable(1.0)
    opt = tf.keras.mixed_precision.LossScaleOptimizer(
        tf.keras.optimizers.SGD(0.5), initial_scale=2.**10,
        dynamic_growth_steps=2)

  def step(x):
    with tf.GradientTape() as tape:
      loss = tf.cast(tf.cast(var, tf.float16) * x, tf.float32)
      scaled = opt.get_scaled_loss(loss)
    (grad,) = opt.get_unscaled_gradients(tape.gradient(scaled, [var]))
    opt.apply_gradients([(grad, var)])

  def replicated(x):
    strategy.run(step, args=(x,))

  if use_function:
    replicated = tf.function(replicated)
  scales = []
  # The float16 gradient 1000 * 2**10 overflows: the first step is skipped and
  # halves the scale; the next two finite steps apply and grow it again.
  for x in (1000., 2.**-10, 2.**-10):
    replicated(tf.constant(x, tf.float16))
    scales.append(float(opt.loss_scale))
  return float(var.numpy()), scales


@pytest.mark.parametrize("use_function", [False, True])
def test_installed_endpoint_trains_eagerly_in_function_and_mirrored(
    installed, mirrored_strategy, use_function):
  del installed
  for strategy in (tf.distribute.get_strategy(), mirrored_strategy):
    value, scales = _train(strategy, use_function)
    assert scales == [2.**9, 2.**9, 2.**10]
    # Each replica's gradient 2**-10 is summed over replicas, as in TF 2.4.
    replicas = strategy.num_replicas_in_sync
    assert value == 1.0 - 2 * 0.5 * replicas * 2.**-10



def test_plain_saved_model_load_serves_tf24_keras_saved_models_installed():
  # pylint: disable=g-import-not-at-top,protected-access
  from tf_mixed_precision_compat.legacy import _saved_model
  from tf_mixed_precision_compat import _private_api
  from tests import testing
  path = testing.fixture_path("legacy", "sm_tf24_func_adam")
  revived = _private_api.revived_types
  saved = (dict(revived._REVIVED_TYPE_REGISTRY),
           list(revived._TYPE_IDENTIFIERS),
           list(_saved_model._registered))
  # Start from a TF where nothing revives Keras 2 optimizers: without
  # tf_keras, and before this package registered anything.
  _private_api.unregister_revived_type("optimizer")
  _saved_model._registered.clear()
  try:
    with pytest.raises(Exception, match="add_slot"):
      tf.saved_model.load(path)
    mp.install()
    try:
      assert callable(tf.saved_model.load(path))
    finally:
      mp.uninstall()
    assert "optimizer" not in revived._REVIVED_TYPE_REGISTRY
    assert "optimizer" not in revived._TYPE_IDENTIFIERS
    with pytest.raises(Exception, match="add_slot"):
      tf.saved_model.load(path)
  finally:
    revived._REVIVED_TYPE_REGISTRY.clear()
    revived._REVIVED_TYPE_REGISTRY.update(saved[0])
    revived._TYPE_IDENTIFIERS[:] = saved[1]
    _saved_model._registered[:] = saved[2]


def test_install_keeps_another_librarys_optimizer_registration():
  # pylint: disable=g-import-not-at-top,protected-access
  from tf_mixed_precision_compat import _private_api
  revived = _private_api.revived_types
  # tf_keras (installed by the test command) registered it on import.
  import tf_keras  # pylint: disable=unused-import
  before = (revived._REVIVED_TYPE_REGISTRY.get("optimizer"),
            list(revived._TYPE_IDENTIFIERS))
  assert before[0] is not None
  mp.install()
  mp.uninstall()
  assert revived._REVIVED_TYPE_REGISTRY.get("optimizer") is before[0]
  assert revived._TYPE_IDENTIFIERS == before[1]
  # Saving still works afterwards (a dangling identifier broke it).
  tf.saved_model.save(tf.Module(), tempfile.mkdtemp())
