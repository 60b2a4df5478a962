"""Every import form of TF 2.3/2.4 code reaches what install() hooked (Keras 3).

`from tensorflow.keras.models import load_model` and the other forms load
Keras' API files again as new modules unless install() intercepts them
(`_import_hooks`); each form runs in a fresh interpreter
(`tests/install/import_forms.py`) and must load TF 2.4.4's H5 file, SavedModel
and
`LossScaleOptimizer` config exactly as `tf.keras.models.load_model` does.
The tf_keras target's counterpart is
tests/targets/tf_keras/test_tf_keras_install_imports.py; the one-line tf_keras
choice (`auto_tf_keras`) is tested here, as it needs no environment variable.
"""

import pytest

from tests.install import import_forms

_KERAS3 = False


@pytest.mark.parametrize("form", sorted(import_forms.FORMS))
def test_import_form_after_install_line_loads_tf24_files(form):
  import_forms.assert_ok(
      import_forms.run(import_forms.script(form), legacy_keras=_KERAS3))


def test_keras_package_itself_is_hooked():
  code = import_forms.script("attribute").replace(
      "load_model = tf.keras.models.load_model",
      "import keras\nload_model = keras.models.load_model").replace(
          "deserialize = tf.keras.optimizers.deserialize",
          "deserialize = keras.optimizers.deserialize")
  import_forms.assert_ok(import_forms.run(code, legacy_keras=_KERAS3))


def test_without_install_the_imported_names_fail_as_issue_reports():
  # What TF 2.21 does by itself: the imported load_model is Keras 3's.
  code = """
import os, sys
import tensorflow as tf
from tensorflow.keras.models import load_model
from tests import testing
try:
  load_model(testing.fixture_path("legacy", "sm_tf24_func_adam"))
except ValueError as e:
  assert "File format not supported" in str(e), e
  print("OK")
"""
  import_forms.assert_ok(import_forms.run(code, legacy_keras=_KERAS3))


_EARLY = """
import functools
from tensorflow.keras.models import load_model as early_load
from tensorflow.keras.optimizers import deserialize as early_deserialize
from tensorflow.keras.mixed_precision import LossScaleOptimizer
import tensorflow.keras.models as early_models
from tensorflow import keras as early_keras
LOADERS = {"h5": early_load}
load_quick = functools.partial(early_load, compile=True)
"""


def test_names_imported_above_the_install_line_are_hooked_or_named():
  code = import_forms.script(
      "attribute", before=_EARLY, early_bound=True,
      install_line="""
import warnings
with warnings.catch_warnings(record=True) as caught:
  warnings.simplefilter("always")
  import tf_mixed_precision_compat.auto
# The install line's warning; not the version check's (on releases newer
# than the newest verified, such as the canary's nightlies).
messages = [str(w.message) for w in caught
            if "tf_mixed_precision_compat" in str(w.message) and
            w.category.__name__ != "UnverifiedVersionWarning"]
assert len(messages) == 1, messages
for name in ("__main__.LOADERS", "__main__.load_quick",
             "__main__.LossScaleOptimizer"):
  assert name in messages[0], messages
assert "__main__.early_load" not in messages[0], messages
assert "move `import tf_mixed_precision_compat.auto`" in messages[0]
assert early_models.load_model is tf.keras.models.load_model
assert early_keras.models.load_model is tf.keras.models.load_model
from tensorflow.keras.models import load_model as late_load_model
assert late_load_model is tf.keras.models.load_model
assert hasattr(late_load_model, "__wrapped__")
""").replace("load_model = tf.keras.models.load_model\n",
             "load_model = early_load\n", 1).replace(
                 "deserialize = tf.keras.optimizers.deserialize\n",
                 "deserialize = early_deserialize\n", 1)
  code = code.replace('print("OK")', """
assert not hasattr(early_load, "__wrapped__")  # Rebound back.
assert not hasattr(early_deserialize, "__wrapped__")
print("OK")""")
  import_forms.assert_ok(import_forms.run(code, legacy_keras=_KERAS3))


# ------------------------------------------------------------- auto_tf_keras --

_AUTO_TF_KERAS = "import tf_mixed_precision_compat.auto_tf_keras"


@pytest.mark.parametrize("form", ["attribute", "from_module_import_name"])
def test_auto_tf_keras_selects_tf_keras_without_the_variable(form):
  code = import_forms.script(form, install_line=_AUTO_TF_KERAS) + """
import os
assert tf.keras.Model.__module__.startswith("tf_keras."), tf.keras.Model
assert os.environ["TF_USE_LEGACY_KERAS"] == "1"
"""
  import_forms.assert_ok(import_forms.run(code, legacy_keras=False))


@pytest.mark.parametrize("use", ["tf.keras.layers.Dense",
                                 "tf.optimizers.Adam",
                                 "import tensorflow.keras.models"])
def test_auto_tf_keras_refuses_after_keras3_resolved(use):
  statement = use if use.startswith("import") else f"_ = {use}"
  code = f"""
import tensorflow as tf
{statement}
try:
  {_AUTO_TF_KERAS}
except RuntimeError as e:
  assert "already resolved to Keras 3" in str(e), e
  assert "right after `import tensorflow as tf`" in str(e), e
  import tf_mixed_precision_compat as mp
  assert not mp.installed()
  print("OK")
"""
  import_forms.assert_ok(import_forms.run(code, legacy_keras=False))


def test_auto_tf_keras_without_tf_keras_names_the_install_command():
  code = f"""
import sys
sys.modules["tf_keras"] = None  # As if not installed.
import tensorflow as tf
try:
  {_AUTO_TF_KERAS}
except ImportError as e:
  major, minor = tf.__version__.split(".")[:2]
  assert f"pip install tf-keras=={{major}}.{{minor}}.*" in str(e), e
  print("OK")
"""
  import_forms.assert_ok(import_forms.run(code, legacy_keras=False))
