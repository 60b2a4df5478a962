"""Every import form of TF 2.3/2.4 code reaches the hooked Keras (tf_keras).

The tf_keras target's counterpart of tests/install/test_import_forms.py: on this
target an import statement naming `tensorflow.keras...` re-executes
tf_keras's API files, and without install()'s hooks the SavedModel loaded
through `from tensorflow.keras.models import load_model` silently got a fresh
optimizer (iterations 0) instead of TF 2.4.4's recorded state. Each form runs
in a fresh interpreter (`tests/install/import_forms.py`).
"""

import pytest

from tests.install import import_forms

_TF_KERAS = True


@pytest.mark.parametrize("form", sorted(import_forms.FORMS))
def test_import_form_after_install_line_loads_tf24_files(form):
  import_forms.assert_ok(
      import_forms.run(import_forms.script(form), legacy_keras=_TF_KERAS))


def test_tf_keras_package_itself_is_hooked():
  code = import_forms.script("attribute").replace(
      "load_model = tf.keras.models.load_model",
      "import tf_keras as keras\nload_model = keras.models.load_model")
  import_forms.assert_ok(import_forms.run(code, legacy_keras=_TF_KERAS))


def test_without_install_the_imported_load_model_is_silently_fresh():
  # What tf_keras does by itself, the silent failure the hooks prevent.
  code = """
import tensorflow as tf
from tensorflow.keras.models import load_model
from tests import testing
model = load_model(testing.fixture_path("legacy", "sm_tf24_func_adam"))
assert int(model.optimizer.iterations.numpy()) == 0
print("OK")
"""
  import_forms.assert_ok(import_forms.run(code, legacy_keras=_TF_KERAS))


def test_names_imported_above_the_install_line_are_hooked():
  code = import_forms.script(
      "attribute", early_bound=True,
      before="""
from tensorflow.keras.models import load_model as early_load_model
import tensorflow.keras.models as early_models
""", install_line="""
import tf_mixed_precision_compat.auto
assert early_models.load_model is tf.keras.models.load_model
assert hasattr(early_load_model, "__wrapped__")
""").replace("load_model = tf.keras.models.load_model\n",
             "load_model = early_load_model\n", 1)
  code = code.replace('print("OK")', """
assert not hasattr(early_load_model, "__wrapped__")  # Rebound back.
print("OK")""")
  import_forms.assert_ok(import_forms.run(code, legacy_keras=_TF_KERAS))


def test_auto_tf_keras_with_the_variable_set_installs():
  code = import_forms.script(
      "from_module_import_name",
      install_line="import tf_mixed_precision_compat.auto_tf_keras")
  import_forms.assert_ok(import_forms.run(code, legacy_keras=_TF_KERAS))

