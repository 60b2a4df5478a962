"""The import-time version check names what is missing and how to fix it."""

import sys
import types

import keras
import pytest
import tensorflow as tf

from tf_mixed_precision_compat import _version_check


@pytest.mark.parametrize("version, parsed", [
    ("2.18.1", (2, 18)), ("3.7.0rc1", (3, 7)), ("2.21.0-dev20260101", (2, 21)),
    ("3", (3, 0)), ("2.x", (2, 0))])
def test_parse(version, parsed):
  assert _version_check.parse(version) == parsed


def test_installed_versions_pass():
  _version_check.check()
  assert _version_check.parse(tf.__version__) >= _version_check.MIN_TENSORFLOW
  assert _version_check.parse(keras.__version__) >= _version_check.MIN_KERAS


def _fake(monkeypatch, name, version):
  module = types.ModuleType(name)
  module.__version__ = version
  monkeypatch.setitem(sys.modules, name, module)


def test_old_tensorflow_is_refused_with_the_install_hint(monkeypatch):
  _fake(monkeypatch, "tensorflow", "2.17.1")
  with pytest.raises(ImportError) as e:
    _version_check.check()
  assert "needs TensorFlow >= 2.18, found 2.17.1" in str(e.value)
  assert "tf_mixed_precision_compat[cpu]" in str(e.value)


def test_old_keras_is_refused(monkeypatch):
  _fake(monkeypatch, "keras", "3.6.0")
  with pytest.raises(ImportError, match=r"needs Keras >= 3\.7, found 3\.6\.0"):
    _version_check.check()


def test_missing_tensorflow_is_refused(monkeypatch):
  monkeypatch.setitem(sys.modules, "tensorflow", None)  # Import fails.
  with pytest.raises(ImportError, match=r"needs TensorFlow >= 2\.18\. "):
    _version_check.check()


def test_setup_cfg_pins_the_same_minimums():
  import configparser  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  cfg = configparser.ConfigParser()
  cfg.read(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__)))), "setup.cfg"))
  tf_min = "%d.%d" % _version_check.MIN_TENSORFLOW
  keras_min = "%d.%d" % _version_check.MIN_KERAS
  extras = cfg["options.extras_require"]
  assert f"tensorflow-cpu>={tf_min}" in extras["cpu"].split()
  assert f"tensorflow>={tf_min}" in extras["tensorflow"].split()
  assert f"keras>={keras_min}" in cfg["options"]["install_requires"].split()
