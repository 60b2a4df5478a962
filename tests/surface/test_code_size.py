"""Size limits the code keeps (issue-level rules, checked on every run).

No function of the package is over 60 lines and no class over 400, counted
from its `def`/`class` line to its last line, docstring included.
"""

import ast
import pathlib

import pytest

_PACKAGE = pathlib.Path(__file__).resolve().parents[2] / (
    "tf_mixed_precision_compat")
_LIMITS = {ast.FunctionDef: 60, ast.AsyncFunctionDef: 60, ast.ClassDef: 400}


def _too_long(source, name="<source>"):
  found = []
  for node in ast.walk(ast.parse(source)):
    limit = _LIMITS.get(type(node))
    if limit is not None:
      length = node.end_lineno - node.lineno + 1
      if length > limit:
        found.append(f"{name}:{node.lineno} {node.name} ({length} lines)")
  return found


def test_no_function_over_60_lines_and_no_class_over_400():
  found = []
  for path in sorted(_PACKAGE.rglob("*.py")):
    found += _too_long(path.read_text(), str(path.relative_to(_PACKAGE)))
  assert not found, "\n".join(found)


@pytest.mark.parametrize("source, expected", [
    ("def f():\n" + "  x = 1\n" * 60, ["<source>:1 f (61 lines)"]),
    ("def f():\n" + "  x = 1\n" * 59, []),
    ("class C:\n" + "  x = 1\n" * 400, ["<source>:1 C (401 lines)"]),
])
def test_the_check_counts_from_def_to_last_line(source, expected):
  assert _too_long(source) == expected
