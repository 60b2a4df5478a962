"""Notebooks for `migrate`: code cells as one module, rewritten cell by cell.

A notebook's code cells share their names (an import in the first, its use
in the fifth), so they are migrated as one module: each cell after a marker
comment, IPython's magics and shell lines (`%matplotlib`, `!pip`) masked as
comments. The rewritten module is split at the markers again; outputs,
metadata and the other cells stay as they were.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Optional

_CELL = "# tf_mixed_precision_compat: cell {}"
_MAGIC = "# tf_mixed_precision_compat: magic {}"
_CELL_LINE = re.compile(r"^# tf_mixed_precision_compat: cell (\d+)$")
_MAGIC_LINE = re.compile(r"^(\s*)# tf_mixed_precision_compat: magic (\d+)$")
# IPython lines Python cannot parse: magics, shell escapes, help.
_IPYTHON = re.compile(r"^\s*(%|!|\?)|\?\s*$")


def _text(cell: dict) -> str:
  source = cell.get("source", "")
  return "".join(source) if isinstance(source, list) else source


def _lines(text: str, like: Any) -> Any:
  """`text` in the form the notebook kept it (a list of lines or a str)."""
  if isinstance(like, str):
    return text
  return text.splitlines(keepends=True)


def to_module(cells: list) -> tuple[str, list]:
  """`(module source, masked lines)` of the notebook's code cells.

  Example:

  >>> source, masked = to_module([
  ...     {"cell_type": "code", "source": ["%matplotlib inline\\n", "x = 1"]}])
  >>> print(source, end="")
  # tf_mixed_precision_compat: cell 0
  # tf_mixed_precision_compat: magic 0
  x = 1
  """
  parts: list[str] = []
  masked: list[str] = []
  for index, cell in enumerate(cells):
    if cell.get("cell_type") != "code":
      continue
    lines = []
    for line in _text(cell).splitlines():
      if _IPYTHON.search(line):
        indent = line[:len(line) - len(line.lstrip())]
        lines.append(indent + _MAGIC.format(len(masked)))
        masked.append(line)
      else:
        lines.append(line)
    parts.append("\n".join([_CELL.format(index)] + lines))
  return "\n".join(parts) + "\n", masked


def from_module(source: str, cells: list, masked: list) -> list:
  """`cells` with each code cell's source as the rewritten module has it."""
  texts: dict = {}
  current = None
  head: list[str] = []  # Lines a rewrite put before the first cell.
  for line in source.splitlines():
    marker = _CELL_LINE.match(line)
    if marker:
      current = int(marker.group(1))
      texts[current] = head
      head = []
      continue
    magic = _MAGIC_LINE.match(line)
    if magic:
      line = masked[int(magic.group(2))]
    (head if current is None else texts[current]).append(line)
  out = []
  for index, cell in enumerate(cells):
    if index in texts:
      original = _text(cell)
      text = "\n".join(texts[index])
      if original.endswith("\n") or not original:
        text = text + "\n" if text else text
      elif text.endswith("\n"):
        text = text[:-1]
      if text != original:
        cell = {**cell, "source": _lines(text, cell.get("source", ""))}
    out.append(cell)
  return out


def migrate(text: str, migrate_source: Callable[[str], tuple[str, list]]
            ) -> tuple[str, list, list]:
  """`(new notebook text, findings, (cell, line) of each finding's line)`
  of the notebook `text`, its code migrated by `migrate_source`."""
  notebook = json.loads(text)
  cells = notebook.get("cells", [])
  source, masked = to_module(cells)
  new, findings = migrate_source(source)
  where = _cell_lines(source)
  places = [where[f.line - 1] if 0 < f.line <= len(where) else (None, f.line)
            for f in findings]
  if new == source:
    return text, findings, places
  notebook["cells"] = from_module(new, cells, masked)
  # As Jupyter writes them: one-space indent, UTF-8 kept, final newline.
  return (json.dumps(notebook, indent=1, ensure_ascii=False) + "\n",
          findings, places)


def _cell_lines(source: str) -> list:
  """`(cell index, line in the cell)` of each line of the module."""
  out: list[tuple[Optional[int], int]] = []
  cell: Optional[int] = None
  line_in_cell = 0
  for line in source.splitlines():
    match = _CELL_LINE.match(line)
    if match:
      cell, line_in_cell = int(match.group(1)), 0
      out.append((cell, 0))
      continue
    line_in_cell += 1
    out.append((cell, line_in_cell))
  return out
