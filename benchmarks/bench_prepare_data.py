"""How long ``prepare-data`` takes on a file the size of guru's math split (54,404 rows).

Builds a synthetic file in guru's raw schema (prompts with the boxed sentence, a few
NaN pass rates, empty prompts and duplicate questions mixed in, a long ``solution``
column the conversion does not read), then times, side by side in one run:

* ``prepare``: the whole command path: read parquet, convert, validate, write, provenance;
* ``convert``: :func:`mathagent.tasks.convert_guru` alone on a table in memory;
* ``per-row``: the same cleanup written as a Python loop over rows (the shape of the
  reference script), as the yardstick the vectorised code is compared with.

    python benchmarks/bench_prepare_data.py [--rows 54404] [--repeat 3]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mathagent import tasks


def synthetic_guru(rows: int, seed: int = 0) -> pa.Table:
    """A raw guru-schema table of ``rows`` rows, built with array operations only."""
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 10_000, rows)
    b = rng.integers(1, 10_000, rows)
    # ~2% of rows repeat an earlier question
    src = np.where(rng.random(rows) < 0.02, rng.integers(0, rows, rows), np.arange(rows))
    text = pa.array([f"Problem {s}: what is {x} + {y}? Explain." for s, x, y
                     in zip(src, a[src], b[src], strict=True)])
    content = pc.binary_join_element_wise(
        text, pa.scalar(tasks.BOXED_SENTENCE), " ")
    messages = pa.StructArray.from_arrays([pa.array(["user"] * rows), content],
                                          names=["role", "content"])
    lengths = np.where(rng.random(rows) < 0.003, 0, 1)  # a few empty prompts
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    keep = np.repeat(np.arange(rows), lengths)
    prompt = pa.ListArray.from_arrays(pa.array(offsets), messages.take(pa.array(keep)))
    truth = pa.array((a[src] + b[src]).astype(str))
    reward = pa.StructArray.from_arrays([truth, pa.array(["rule"] * rows)],
                                        names=["ground_truth", "style"])

    def rates():
        p = rng.integers(0, 17, rows) / 16.0
        p[rng.random(rows) < 0.01] = np.nan
        return pa.array(p)

    solution = pa.array(np.char.multiply(np.array(["Add the two numbers carefully. "]), 12)
                        .repeat(rows))
    extra = pa.StructArray.from_arrays([pa.array(np.arange(rows))], names=["index"])
    return pa.table({"data_source": pa.array(["math__synthetic"] * rows), "prompt": prompt,
                     "ability": pa.array(["math"] * rows), "reward_model": reward,
                     "extra_info": extra, "qwen2.5_7b_pass_rate": rates(),
                     "qwen3_30b_pass_rate": rates(), "solution": solution})


def per_row_reference(table: pa.Table) -> int:
    """The conversion as a plain loop over Python dicts (drops rows with gaps)."""
    kept, seen = 0, set()
    for row in table.to_pylist():
        prompt = row["prompt"] or []
        if not prompt:
            continue
        question = prompt[0]["content"].replace(tasks.BOXED_SENTENCE, "").strip()
        truth = (row["reward_model"] or {}).get("ground_truth")
        rates = [row[k] for k in tasks.GURU_PASS_RATE_KEYS]
        if not question or not truth or any(r is None or math.isnan(r) for r in rates):
            continue
        if question in seen:
            continue
        seen.add(question)
        kept += 1
    return kept


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=54_404)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    table = synthetic_guru(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "math__combined_synthetic.parquet"
        pq.write_table(table, raw)
        size_mb = raw.stat().st_size / 1e6
        out = Path(tmp) / "out"
        report = tasks.prepare_guru(raw, out)
        t_prepare = best_of(lambda: tasks.prepare_guru(raw, out), args.repeat)
        t_convert = best_of(lambda: tasks.convert_guru(table), args.repeat)
        kept = per_row_reference(table)
        t_loop = best_of(lambda: per_row_reference(table), args.repeat)
    assert kept == report.rows_out, (kept, report.rows_out)
    print(f"synthetic guru file: {args.rows:,} rows, {size_mb:.1f} MB parquet; "
          f"kept {report.rows_out:,}, dropped {dict(report.dropped)}")
    print(f"{'step':<34}{'best of ' + str(args.repeat):>12}{'rows/s':>14}{'vs per-row':>12}")
    for name, t in (("prepare (read+convert+write)", t_prepare),
                    ("convert_guru (in memory)", t_convert),
                    ("per-row Python loop (in memory)", t_loop)):
        print(f"{name:<34}{t:>11.3f}s{args.rows / t:>14,.0f}{t_loop / t:>11.1f}x")


if __name__ == "__main__":
    main()
