"""Scripts for the import-form tests of both targets (fresh interpreters).

Each script imports Keras one way TF 2.3/2.4 code did, then loads what TF
2.4.4 wrote (tools/gen_legacy_*.py, tests/fixtures/legacy and keras_lso)
through the imported names and through `tf.keras.models.load_model`, and
compares the optimizer state with what TF 2.4.4 recorded. The import forms
change process-wide state (`sys.modules`, `tf.keras`), hence the fresh
interpreters.
"""

import os
import subprocess
import sys
import textwrap

from tests import testing

REPO_ROOT = testing.REPO_ROOT

# Each form binds `load_model`, `deserialize` and the module handles
# `models, optimizers, mixed_precision, layers, callbacks`.
FORMS = {
    "attribute": """
        load_model = tf.keras.models.load_model
        deserialize = tf.keras.optimizers.deserialize
        models, optimizers = tf.keras.models, tf.keras.optimizers
        mixed_precision, layers = tf.keras.mixed_precision, tf.keras.layers
        callbacks = tf.keras.callbacks
        """,
    "from_module_import_name": """
        from tensorflow.keras.models import load_model
        from tensorflow.keras.optimizers import deserialize
        from tensorflow.keras.mixed_precision import experimental
        from tensorflow.keras.layers import Dense
        from tensorflow.keras.callbacks import ModelCheckpoint
        import tensorflow.keras.models as models
        import tensorflow.keras.optimizers as optimizers
        import tensorflow.keras.mixed_precision as mixed_precision
        import tensorflow.keras.layers as layers
        import tensorflow.keras.callbacks as callbacks
        assert experimental is mixed_precision.experimental
        assert Dense is layers.Dense
        assert ModelCheckpoint is callbacks.ModelCheckpoint
        """,
    "from_package_import_module": """
        from tensorflow.keras import models, optimizers, mixed_precision
        from tensorflow.keras import layers, callbacks
        load_model, deserialize = models.load_model, optimizers.deserialize
        """,
    "import_as": """
        import tensorflow.keras.models as models
        import tensorflow.keras.optimizers as optimizers
        import tensorflow.keras.mixed_precision as mixed_precision
        import tensorflow.keras.layers as layers
        import tensorflow.keras.callbacks as callbacks
        import tensorflow.keras.mixed_precision.experimental as experimental
        assert experimental is mixed_precision.experimental
        load_model, deserialize = models.load_model, optimizers.deserialize
        """,
    "from_tensorflow_import_keras": """
        from tensorflow import keras
        models, optimizers = keras.models, keras.optimizers
        mixed_precision, layers = keras.mixed_precision, keras.layers
        callbacks = keras.callbacks
        load_model, deserialize = models.load_model, optimizers.deserialize
        """,
    "saving_module": """
        from tensorflow.keras.saving import load_model
        from tensorflow.keras.optimizers import deserialize
        from tensorflow.keras import models, optimizers, mixed_precision
        from tensorflow.keras import layers, callbacks
        """,
}

# What the loads check, against TF 2.4.4's records.
CHECKS = """
import json, os, sys
FIXTURES = {fixtures!r}

def meta(name):
  with open(os.path.join(FIXTURES, "legacy", name + ".json")) as f:
    return json.load(f)

def check_state(model, name):
  opt, expected = model.optimizer, meta(name)
  assert isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer), opt
  assert int(opt.iterations.numpy()) == expected["iterations"], name
  if expected["format"] == "h5":  # TF 2.x H5 files hold no loss scale.
    scale, counter = expected["initial_scale"], 0
  else:
    scale, counter = expected["loss_scale"], expected["counter"]
  assert float(opt.loss_scale.numpy()) == scale, name
  assert int(opt.dynamic_counter.numpy()) == counter, name

for load in (load_model, tf.keras.models.load_model):
  check_state(load(os.path.join(FIXTURES, "legacy", "h5_tf24_func_sgd.h5")),
              "h5_tf24_func_sgd")
  check_state(load(os.path.join(FIXTURES, "legacy", "sm_tf24_func_adam")),
              "sm_tf24_func_adam")
with open(os.path.join(FIXTURES, "keras_lso", "configs_tf24.json")) as f:
  config = json.load(f)["dynamic_custom_adam"]
for load in (deserialize, tf.keras.optimizers.deserialize):
  opt = load(config["serialize"])
  assert isinstance(opt, tf.keras.mixed_precision.LossScaleOptimizer), opt
  for key in ("dynamic", "initial_scale", "dynamic_growth_steps"):
    assert opt.get_config()[key] == config["get_config"][key], key
  inner = config["get_config"]["inner_optimizer"]["config"]
  for key in ("beta_1", "learning_rate"):  # float32 on both targets.
    assert abs(float(opt.inner_optimizer.get_config()[key]) -
               inner[key]) < 1e-7, key
# One module object per namespace, hooked, whichever way it was reached.
for name, module in (("models", models), ("optimizers", optimizers),
                     ("mixed_precision", mixed_precision),
                     ("layers", layers), ("callbacks", callbacks)):
  assert module is getattr(tf.keras, name), name
assert mixed_precision.experimental.LossScaleOptimizer is (
    tf.keras.mixed_precision.experimental.LossScaleOptimizer)
assert load_model is tf.keras.models.load_model or (
    load_model.__wrapped__ is tf.keras.models.load_model.__wrapped__)
"""

# After uninstall(): no alias, finder, or replaced function is left.
UNDO_CHECKS = """
import tf_mixed_precision_compat as mp
from tf_mixed_precision_compat import _import_hooks
mp.uninstall()
assert not [f for f in sys.meta_path
            if isinstance(f, _import_hooks.AliasFinder)]
assert early_bound or not [
    n for n in sys.modules if n.startswith("tensorflow.keras")]
assert not hasattr(tf.keras.models.load_model, "__wrapped__")
assert not hasattr(tf.keras.optimizers.deserialize, "__wrapped__")
assert not hasattr(tf.keras.mixed_precision, "experimental")
for original in (tf.keras.models.load_model, tf.keras.optimizers.deserialize):
  # Where Keras defines it, for API modules executed later.
  assert vars(sys.modules[original.__module__])[original.__name__] is original
  # Also in API modules executed while installed (e.g. tensorflow.keras.saving).
  for name, module in list(sys.modules.items()):
    if name.startswith(("keras", "tf_keras", "tensorflow.keras")):
      value = vars(module).get(original.__name__)
      assert getattr(value, "__wrapped__", None) is not original, name
print("OK")
"""


def script(form, install_line="import tf_mixed_precision_compat.auto",
           before="", early_bound=False):
  """A script: `import tensorflow as tf`, `before`, the install line, `form`."""
  return "\n".join([
      "import tensorflow as tf",
      textwrap.dedent(before),
      install_line,
      textwrap.dedent(FORMS[form]),
      CHECKS.format(fixtures=testing.FIXTURES),
      f"early_bound = {early_bound!r}",
      UNDO_CHECKS,
  ])


def run(code, legacy_keras):
  """Runs `code` in a fresh interpreter on the given target.

  Returns:
    The `subprocess.CompletedProcess` (text output).
  """
  env = dict(os.environ, PYTHONPATH=REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  env.pop("TF_USE_LEGACY_KERAS", None)
  if legacy_keras:
    env["TF_USE_LEGACY_KERAS"] = "1"
  return subprocess.run([sys.executable, "-c", code], capture_output=True,
                        text=True, env=env, cwd=REPO_ROOT,
                        timeout=900)  # A hang guard only.


def assert_ok(result):
  assert result.returncode == 0, result.stderr[-4000:]
  assert result.stdout.strip().endswith("OK"), result.stdout[-2000:]
