"""Measures `migrate` on a corpus of real TF 2.2-2.4 mixed-precision files.

The corpus itself lives outside the repository; tools/migrate_corpus.json
lists where each file came from (repository, path, commit) and what kind of
job it is. For every listed file this runs `migrate_source`, counts the uses
it found by status, and checks that the output compiles and that migrating
it again changes nothing.

  python tools/migrate_corpus.py --corpus /work/corpus [--markdown]
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import shutil
import sys
import tempfile
from typing import Any

from tf_mixed_precision_compat.cli._rewrite import migrate_source

_HERE = pathlib.Path(__file__).resolve().parent
_COLUMNS = ("repo", "file", "kind", "uses", "rewritten", "manual",
            "compiles", "idempotent")


def corpus_path(corpus: pathlib.Path, entry: dict[str, Any]) -> pathlib.Path:
  """Where a manifest entry's file is kept: <owner>__<repo>/<path, / as __>."""
  return (corpus / entry["repo"].replace("/", "__")
          / entry["path"].replace("/", "__"))


def measure(source: str, name: str) -> dict[str, Any]:
  """Migrates `source` and checks the result.

  Args:
    source: The file's text.
    name: The file name, for `compile` messages.

  Returns:
    A row: counts by status, whether the output compiles, whether a second
    migration leaves it unchanged; `error` set when `migrate_source` raised.
  """
  row: dict[str, Any] = {"uses": 0, "rewritten": 0, "native": 0,
                         "manual": 0, "compiles": "-", "idempotent": "-"}
  try:
    code, findings = migrate_source(source)
  except Exception as e:  # pylint: disable=broad-except
    row["error"] = f"error: {type(e).__name__}: {str(e).splitlines()[0]}"
    return row
  status = collections.Counter(f.status for f in findings)
  row.update(uses=len(findings), rewritten=status["rewrite"],
             native=status["native"], manual=status["manual"])
  try:
    compile(code, name, "exec")
    row["compiles"] = "yes"
  except SyntaxError as e:
    row["compiles"] = f"no ({e.msg}, line {e.lineno})"
  try:
    again, _ = migrate_source(code)
    row["idempotent"] = "yes" if again == code else "no"
  except Exception as e:  # pylint: disable=broad-except
    row["idempotent"] = f"error: {type(e).__name__}"
  return row


def run(corpus: pathlib.Path, manifest: list[dict[str, Any]]
        ) -> list[dict[str, Any]]:
  """Measures every manifest entry on a copy in a temporary directory."""
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    for entry in manifest:
      row = {"repo": entry["repo"], "file": entry["path"],
             "kind": entry.get("kind", "other")}
      src = corpus_path(corpus, entry)
      if not src.is_file():
        rows.append({**row, "missing": True})
        continue
      copy = pathlib.Path(tmp) / src.name
      shutil.copyfile(src, copy)
      text = copy.read_text(encoding="utf-8", errors="replace")
      rows.append({**row, **measure(text, str(copy))})
  return rows


def table(rows: list[dict[str, Any]], markdown: bool) -> str:
  """The rows as a markdown (or plain, tab-separated) table with totals."""
  cells = []
  for row in rows:
    if row.get("missing"):
      cells.append([row["repo"], row["file"], row["kind"], "missing"]
                   + [""] * 4)
    elif "error" in row:
      cells.append([row["repo"], row["file"], row["kind"], row["error"]]
                   + [""] * 4)
    else:
      cells.append([str(row[c]) for c in _COLUMNS])
  present = [r for r in rows if not r.get("missing")]
  totals = {
      "files": len(present), "missing": len(rows) - len(present),
      "repos": len({r["repo"] for r in present}),
      # A failed first or second migration (the idempotency check).
      "errors": sum("error" in r or str(r.get("idempotent", "")).startswith(
          "error") for r in present),
      **{k: sum(r.get(k, 0) for r in present)
         for k in ("uses", "rewritten", "native", "manual")}}
  total_line = ", ".join(f"{k}: {v}" for k, v in totals.items())
  if not markdown:
    return "\n".join("\t".join(c) for c in [list(_COLUMNS), *cells]) + (
        "\n" + total_line)
  lines = ["| " + " | ".join(_COLUMNS) + " |",
           "|" + "---|" * len(_COLUMNS)]
  lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"
            for row in cells]
  return "\n".join(lines) + f"\n\n**Totals**: {total_line}"


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--corpus", type=pathlib.Path, required=True,
                      help="directory holding <owner>__<repo>/<file>")
  parser.add_argument("--manifest", type=pathlib.Path,
                      default=_HERE / "migrate_corpus.json")
  parser.add_argument("--markdown", action="store_true",
                      help="print a markdown table (default: tab-separated)")
  args = parser.parse_args(argv)
  manifest = json.loads(args.manifest.read_text(encoding="utf-8"))
  print(table(run(args.corpus, manifest), args.markdown))
  return 0


if __name__ == "__main__":
  sys.exit(main())
