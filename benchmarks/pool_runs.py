r"""Pools several `bench_loss_scaling.py` runs into one verdict per cell.

One run's standard error covers the noise between its repetitions, not what
differs between runs: which memory layout each compiled instance got and
what else the process built. Two runs of the same cell can differ by a few
points, so "ours is below `floor_gated`" is judged over runs. For every cell
found in all the given result files (`--out` of bench_loss_scaling.py), this
prints ours' overhead minus each reference's: its mean over runs ± the
standard error of that mean, and in how many runs ours was above.

Usage:

  python benchmarks/pool_runs.py r1.json r2.json r3.json \
      [--ours ours_dynamic] [--against floor_gated,floor_dynamic,keras3]
"""

import argparse
import json
import statistics
import sys


def _key(cell):
  return (cell["workload"], cell["mode"], cell["num_vars"], cell["width"])


def pool(runs, ours="ours_dynamic", against=("floor_gated",)):
  """Ours' overhead minus each reference's, per cell, over `runs`.

  Args:
    runs: Results of bench_loss_scaling.py (its JSON, loaded), one per run.
    ours: The contender judged.
    against: The contenders it is judged against.

  Returns:
    A list, in the first run's cell order, of dicts with `cell` (workload,
    mode, variables, width) and, per reference in `against`, `diffs` (points,
    one per run), `mean`, `se` (0 for a single run) and `above` (runs where
    ours was above). A cell missing from a run, or a contender missing from
    a cell, leaves that cell or reference out.
  """
  by_run = [{_key(c): c for c in run["cells"] if c["mode"] != "session"}
            for run in runs]
  pooled = []
  for key in by_run[0] if by_run else ():
    cells = [run_cells.get(key) for run_cells in by_run]
    if any(c is None or ours not in c["contenders"] for c in cells):
      continue
    entry = {"cell": key}
    for ref in against:
      if any(ref not in c["contenders"] for c in cells):
        continue
      diffs = [100. * (c["contenders"][ours]["overhead"] -
                       c["contenders"][ref]["overhead"]) for c in cells]
      entry[ref] = {
          "diffs": diffs,
          "mean": statistics.fmean(diffs),
          "se": (statistics.stdev(diffs) / len(diffs) ** .5
                 if len(diffs) > 1 else 0.),
          "above": sum(d > 0 for d in diffs),
      }
    pooled.append(entry)
  return pooled


def markdown(pooled, against, runs):
  """`pool`'s result as a markdown table."""
  header = ["workload", "mode"] + [f"ours - {ref}" for ref in against]
  lines = [f"Ours' overhead minus each reference's, in points, over {runs} "
           "runs: mean ± standard error (runs where ours was above).", "",
           "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for entry in pooled:
    workload, mode, num_vars, width = entry["cell"]
    row = [f"{workload} ({num_vars}x{width}²)", mode]
    for ref in against:
      if ref not in entry:
        row.append("—")
        continue
      s = entry[ref]
      row.append(f"{s['mean']:+.1f} ±{s['se']:.1f} ({s['above']}/{runs})")
    lines.append("| " + " | ".join(row) + " |")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("results", nargs="+",
                      help="JSON files written by bench_loss_scaling.py --out")
  parser.add_argument("--ours", default="ours_dynamic",
                      help="the contender judged (default ours_dynamic)")
  parser.add_argument("--against", default="floor_gated,floor_dynamic,keras3",
                      help="comma-separated contenders to judge it against")
  args = parser.parse_args(argv)
  runs = []
  for path in args.results:
    with open(path) as f:
      runs.append(json.load(f))
  against = [name for name in args.against.split(",") if name]
  if not against:
    parser.error("--against: name at least one contender, e.g. floor_gated")
  print(markdown(pool(runs, args.ours, against), against, len(runs)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
