r"""Counts the ops each contender's traced training step adds over bare Adam.

Traces the step function of every contender of bench_loss_scaling.py for a
given number of variables and prints the number of ops in the traced graph
(`concrete_function.graph.get_operations()`, counting the ops of nested
function bodies such as `cond` branches too) and the ops by type that a
contender has more than the bare optimizer.

Usage:

  python benchmarks/count_ops.py [--vars 100] [--mode function|mirrored]
"""

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import contenders  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position


def _op_types(graph, seen=None):
  """Op types of `graph` and of the function bodies it calls."""
  seen = set() if seen is None else seen
  counts = collections.Counter()
  for op in graph.get_operations():
    counts[op.type] += 1

  for name, fn in getattr(graph, "_functions", {}).items():
    if name in seen:
      continue
    seen.add(name)
    inner = getattr(fn, "graph", None)
    if inner is not None:
      counts.update(_op_types(inner, seen))
  return counts


def count(name, mode, num_vars, width, strategy=None):
  """Op counts of one contender's step."""
  values, x = contenders.initial_values(num_vars, width)
  step = contenders.make_step(name, mode, values, x, strategy)
  concrete = step.get_concrete_function()
  return _op_types(concrete.graph)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--vars", type=int, default=100)
  parser.add_argument("--width", type=int, default=8)
  parser.add_argument("--mode", default="function",
                      choices=("function", "jit", "mirrored"))
  args = parser.parse_args()
  strategy = (tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
              if args.mode == "mirrored" else None)
  names = ("bare", "floor", "keras3", "ours_dynamic", "ours_fixed")
  counts = {n: count(n, args.mode, args.vars, args.width, strategy)
            for n in names}
  bare = counts["bare"]
  print(f"{args.vars} variables, mode {args.mode}: bare has "
        f"{sum(bare.values())} ops")
  for n in names[1:]:
    extra = counts[n] - bare
    total = sum(counts[n].values()) - sum(bare.values())
    top = ", ".join(f"{k} {v}" for k, v in extra.most_common(12))
    print(f"  {n}: {total:+d} ops ({total / args.vars:+.1f}/var): {top}")


if __name__ == "__main__":
  main()
