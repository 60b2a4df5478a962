"""The import-time version check names what is missing and how to fix it."""

import importlib.metadata
import os
import sys
import types
import warnings

import keras
import pytest
import tensorflow as tf

from tf_mixed_precision_compat import _version_check

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


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


def _fake_tf_keras(monkeypatch, version):
  monkeypatch.setattr(_version_check, "_tf_keras_version", lambda: version)


def test_verified_versions_are_the_ci_pins():
  # The oldest pair is .ci/run's, and the newest verified are at least the
  # minimums (a stale constant would warn on every supported install).
  with open(os.path.join(_ROOT, ".ci", "run")) as f:
    ci = f.read()
  oldest = _version_check.OLDEST_VERIFIED
  assert (f"OLD_TF={oldest['TensorFlow']} OLD_KERAS={oldest['Keras']} "
          f"OLD_TF_KERAS={oldest['tf_keras']}") in ci
  assert _version_check.parse(oldest["TensorFlow"]) == (
      _version_check.MIN_TENSORFLOW)
  assert _version_check.parse(oldest["Keras"]) == _version_check.MIN_KERAS
  assert f"tf-keras=={_version_check.NEWEST_VERIFIED['tf_keras']}" in ci


def _all_verified(monkeypatch):
  """The newest verified releases, whatever is installed (a nightly too)."""
  for module, label in (("tensorflow", "TensorFlow"), ("keras", "Keras")):
    _fake(monkeypatch, module, _version_check.NEWEST_VERIFIED[label])
  _fake_tf_keras(monkeypatch, _version_check.NEWEST_VERIFIED["tf_keras"])


def test_verified_versions_do_not_warn(monkeypatch):
  _all_verified(monkeypatch)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    _version_check.check()


@pytest.mark.parametrize("module, label, version", [
    ("tensorflow", "TensorFlow", "2.21.3"), ("keras", "Keras", "3.15.9"),
    ("tensorflow", "TensorFlow", "2.21.0rc1"),
    ("tensorflow", "TensorFlow", "2.18.1")])
def test_patch_releases_of_verified_minor_versions_do_not_warn(
    monkeypatch, module, label, version):
  del label
  _all_verified(monkeypatch)
  _fake(monkeypatch, module, version)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    _version_check.check()


@pytest.mark.parametrize("module, label, version", [
    ("tensorflow", "TensorFlow", "2.23.0.dev20261026"),
    ("tensorflow", "TensorFlow", "2.22.0"),
    ("keras", "Keras", "3.16.0.dev2026102704"),
    ("keras", "Keras", "4.0.0")])
def test_newer_version_warns_once_naming_installed_and_newest_verified(
    monkeypatch, module, label, version):
  _all_verified(monkeypatch)
  _fake(monkeypatch, module, version)
  with pytest.warns(_version_check.UnverifiedVersionWarning) as record:
    _version_check.check()  # Accepted: no ImportError.
  assert len(record) == 1
  assert issubclass(record[0].category, UserWarning)
  message = str(record[0].message)
  assert (f"not been verified with {label} {version} (newest verified: "
          f"{_version_check.NEWEST_VERIFIED[label]})") in message


def test_newer_tf_keras_warns_and_all_newer_share_one_warning(monkeypatch):
  _fake(monkeypatch, "tensorflow", "2.23.0.dev20261026")
  _fake(monkeypatch, "keras", "3.16.0.dev2026102704")
  _fake_tf_keras(monkeypatch, "2.23.0.dev2026102618")
  with pytest.warns(_version_check.UnverifiedVersionWarning) as record:
    _version_check.check()
  assert len(record) == 1
  message = str(record[0].message)
  newest = _version_check.NEWEST_VERIFIED
  for part in (f"TensorFlow 2.23.0.dev20261026 (newest verified: "
               f"{newest['TensorFlow']})",
               f"Keras 3.16.0.dev2026102704 (newest verified: "
               f"{newest['Keras']})",
               f"tf_keras 2.23.0.dev2026102618 (newest verified: "
               f"{newest['tf_keras']})"):
    assert part in message


def test_old_tensorflow_is_still_refused_not_warned(monkeypatch):
  _all_verified(monkeypatch)
  _fake(monkeypatch, "tensorflow", "2.17.1")
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    with pytest.raises(ImportError, match="found 2.17.1"):
      _version_check.check()


def test_tf_keras_version_read_from_either_distribution(monkeypatch):
  versions = {"tf-keras-nightly": "2.23.0.dev2026102618"}

  def version(distribution):
    if distribution not in versions:
      raise importlib.metadata.PackageNotFoundError(distribution)
    return versions[distribution]

  monkeypatch.setattr(importlib.metadata, "version", version)
  assert _version_check._tf_keras_version() == "2.23.0.dev2026102618"  # pylint: disable=protected-access
  versions.clear()
  assert _version_check._tf_keras_version() is None  # pylint: disable=protected-access
