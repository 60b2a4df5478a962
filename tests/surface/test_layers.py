"""The layering contract of docs/architecture.md, as `lint-imports` checks it.

The package passes; a copy given one upward import, inside a function (the
kind that hides a cycle), fails, naming the import.
"""

import pathlib
import shutil
import subprocess
import sys

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_LINT_IMPORTS = pathlib.Path(sys.executable).parent / "lint-imports"


def _lint_imports(root):
  return subprocess.run(
      [str(_LINT_IMPORTS), "--config", str(root / "setup.cfg"), "--no-cache"],
      cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
      capture_output=True, text=True, timeout=120, check=False)


def _copy(tmp_path):
  shutil.copytree(_ROOT / "tf_mixed_precision_compat",
                  tmp_path / "tf_mixed_precision_compat",
                  ignore=shutil.ignore_patterns("__pycache__"))
  shutil.copy(_ROOT / "setup.cfg", tmp_path / "setup.cfg")
  return tmp_path


def test_the_package_keeps_its_layers(tmp_path):
  result = _lint_imports(_copy(tmp_path))
  assert result.returncode == 0, result.stdout + result.stderr
  assert "0 broken" in result.stdout


@pytest.mark.parametrize("module, upward", [
    # The core reaching the restore pipeline, inside a function.
    ("loss_scale/_scaling.py", "from tf_mixed_precision_compat import legacy"),
    # A shared module asking the hooks instead of `keras_target`.
    ("optimizers/_inner.py", "from tf_mixed_precision_compat import hooks"),
    # The leaf importing the package.
    ("keras_target.py", "import tf_mixed_precision_compat.policy"),
])
def test_an_upward_import_breaks_the_contract(tmp_path, module, upward):
  root = _copy(tmp_path)
  path = root / "tf_mixed_precision_compat" / module
  path.write_text(path.read_text() + f"\n\ndef _late():\n  {upward}\n")
  result = _lint_imports(root)
  assert result.returncode != 0
  assert "BROKEN" in result.stdout.upper()
  assert f"tf_mixed_precision_compat.{module[:-3].replace('/', '.')}" in (
      result.stdout.replace("\n", ""))
