"""The console script setup.cfg declares runs the same commands as `-m`."""

import configparser
import importlib
import os

import pytest

from tests import testing


def _entry_point():
  cfg = configparser.ConfigParser()
  cfg.read(os.path.join(testing.REPO_ROOT, "setup.cfg"))
  line = cfg["options.entry_points"]["console_scripts"].strip()
  name, target = (part.strip() for part in line.split("="))
  module, function = target.split(":")
  return name, getattr(importlib.import_module(module), function)


def test_console_script_is_declared_and_exits_with_the_command_code(
    monkeypatch, tmp_path):
  name, console_main = _entry_point()
  assert name == "tf-mixed-precision-compat"
  monkeypatch.setattr("sys.argv", [name, "inspect", str(tmp_path / "none")])
  with pytest.raises(SystemExit) as exit_info:
    console_main()
  assert exit_info.value.code == 3  # Input unreadable or missing.
  monkeypatch.setattr("sys.argv", [name, "no-such-command"])
  with pytest.raises(SystemExit) as exit_info:
    console_main()
  assert exit_info.value.code == 2  # Usage error.
