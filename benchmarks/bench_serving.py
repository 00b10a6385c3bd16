"""Local model server and batch runner throughput, side by side in one run.

    python benchmarks/bench_serving.py [--tasks 4] [--max-tokens 32] [--concurrency 4] [--rounds 5]

Reports, for the bundled SmolLM2-135M behind llama-cpp-python's server on this machine:

1. the server's raw speed: completion tokens/s of one stream, and prompt tokens/s;
2. the batch runner's tasks/minute at its default concurrency versus one request at a
   time, on the same tasks with greedy decoding (so both runs generate the very same
   tokens, which the script checks);
3. the runner's own overhead: the same requests the agent sent, replayed with the bare
   OpenAI client one at a time, against the runner at concurrency 1; and per rollout,
   wall time minus the time spent inside model calls (agent, judge, bookkeeping).

The three ways of running are interleaved for ``--rounds`` rounds and the fastest round
of each counts (medians are shown as well), because the load of a shared machine drifts
from minute to minute.

Why concurrency barely helps here: llama-cpp-python's server runs one completion at a
time (a lock around its single model context), so extra requests only wait in its queue;
what overlaps is the client-side work, which is tiny next to generation on a CPU. A vLLM
server instead batches every in-flight request into each forward pass (continuous
batching), so on a GPU 32 requests in flight finish in little more time than one, and
tasks/minute grows almost linearly with concurrency until the GPU saturates. Point the
runner at such a server (``MATHAGENT_BASE_URL``) and raise ``--concurrency``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import openai

from mathagent import paths, rollouts
from mathagent.agent import AgentOptions, build_model, make_workflow, metered
from mathagent.serving import LocalServer

FALLBACK_TASKS = [("What is 3 + 4?", "7"), ("What is 12 + 9?", "21"),
                  ("Sam has 4 pens and gets 5 more. How many pens?", "9"),
                  ("What is 81 - 17?", "64"), ("Compute 6 + 2 + 9.", "17"),
                  ("A box holds 15 eggs. 6 break. How many are left?", "9"),
                  ("What is 40 + 13?", "53"), ("What is 7 - 5?", "2")]


def load_tasks(count: int) -> list[dict]:
    """The first ``count`` held-out arithmetic tasks (or a built-in list without them)."""
    test = paths.ARITHMETIC_DIR / "test.parquet"
    if test.exists():
        import pandas as pd

        frame = pd.read_parquet(test).head(count)
        return rollouts.as_task_dicts(frame[["question", "answer"]])
    rows = [{"question": q, "answer": f"#### {a}"} for q, a in FALLBACK_TASKS]
    return rollouts.as_task_dicts((rows * (count // len(rows) + 1))[:count])


def server_speed(client: openai.OpenAI, model: str, repeats: int = 3) -> dict:
    """Completion tokens/s of one stream and prompt-processing tokens/s (medians)."""
    gen, prompt = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        reply = client.chat.completions.create(
            model=model, max_tokens=128, temperature=0.0,
            messages=[{"role": "user", "content": "Count from 1 to 200, separated by commas."}])
        gen.append(reply.usage.completion_tokens / (time.perf_counter() - start))
        long_text = " ".join(f"Item {i} costs {i % 7 + 1} dollars." for i in range(60))
        start = time.perf_counter()
        reply = client.chat.completions.create(
            model=model, max_tokens=1, temperature=0.0,
            messages=[{"role": "user", "content": long_text}])
        prompt.append(reply.usage.prompt_tokens / (time.perf_counter() - start))
    return {"completion_tokens_per_s": statistics.median(gen),
            "prompt_tokens_per_s": statistics.median(prompt)}


def runner(tasks, settings, concurrency: int) -> tuple[float, object]:
    start = time.perf_counter()
    table = rollouts.run_tasks(tasks, settings, concurrency=concurrency, progress=False)
    return time.perf_counter() - start, table


async def capture_requests(tasks, settings) -> list[dict]:
    """The exact chat-completions payloads the workflow sends (one per task here)."""
    workflow = make_workflow(AgentOptions(console_output=False))
    model = build_model(settings)
    payloads = []
    for task in tasks:
        with metered(capture=True) as meter:
            await workflow(task, model)
        payloads += meter.requests
    await model.client.close()
    return payloads


def replay(client: openai.OpenAI, model: str, payloads: list[dict]) -> tuple[float, int]:
    """Send the captured payloads with the bare client, one at a time."""
    tokens = 0
    start = time.perf_counter()
    for p in payloads:
        kwargs = {k: v for k, v in p["generate_kwargs"].items()}
        if p["tools"]:
            kwargs["tools"] = p["tools"]
        reply = client.chat.completions.create(model=model, messages=p["messages"], **kwargs)
        tokens += reply.usage.completion_tokens
    return time.perf_counter() - start, tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=4, help="tasks per run (default: 4)")
    parser.add_argument("--max-tokens", type=int, default=32, help="reply limit (default: 32)")
    parser.add_argument("--concurrency", type=int, default=4,
                        help="the runner's default concurrency for a local server (4)")
    parser.add_argument("--n-threads", type=int, default=None, help="llama.cpp CPU threads")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved repetitions; the fastest counts (default: 5)")
    parser.add_argument("--out", type=Path, default=None, help="also write the numbers as JSON")
    args = parser.parse_args(argv)

    tasks = load_tasks(args.tasks)
    walls: dict[str, list[float]] = {"runner_1": [], "runner_c": [], "raw": []}
    with LocalServer(n_ctx=1024, n_threads=args.n_threads) as server:
        settings = server.settings(temperature=0.0, max_tokens=args.max_tokens)
        client = openai.OpenAI(base_url=server.base_url, api_key="EMPTY")
        speed = server_speed(client, server.model_alias)
        payloads = asyncio.run(capture_requests(tasks, settings))  # also warms everything up
        # Interleave the three ways of running the same work and keep medians: on a shared
        # machine the load changes from minute to minute.
        for _ in range(args.rounds):
            wall, table_1 = runner(tasks, settings, 1)
            walls["runner_1"].append(wall)
            wall, table_c = runner(tasks, settings, args.concurrency)
            walls["runner_c"].append(wall)
            wall, raw_tokens = replay(client, server.model_alias, payloads)
            walls["raw"].append(wall)
    # The fastest round of each is the one least disturbed by other work on the machine
    # (timeit's rule); medians are printed too, to show the spread.
    wall_1, wall_c, wall_raw = (min(walls[k]) for k in ("runner_1", "runner_c", "raw"))
    medians = {k: round(60 * len(tasks) / statistics.median(v), 2) for k, v in walls.items()}

    same_tokens = (list(table_1["tokens"]) == list(table_c["tokens"])
                   and int(table_1["tokens"].sum()) == raw_tokens)
    overhead = (table_1["latency_s"] - table_1["model_s"]) * 1000
    results = {
        "machine": f"{platform.processor() or platform.machine()}, "
                   f"{__import__('os').cpu_count()} cores",
        "tasks": len(tasks), "max_tokens": args.max_tokens, "rounds": args.rounds,
        **{k: round(v, 1) for k, v in speed.items()},
        "tasks_per_min_concurrency_1": round(60 * len(tasks) / wall_1, 2),
        f"tasks_per_min_concurrency_{args.concurrency}": round(60 * len(tasks) / wall_c, 2),
        "concurrency_speedup": round(wall_1 / wall_c, 3),
        "raw_client_tasks_per_min": round(60 * len(tasks) / wall_raw, 2),
        "runner_vs_raw_time_ratio": round(wall_1 / wall_raw, 3),
        "runner_overhead_ms_per_rollout_median": round(float(overhead.median()), 1),
        "runner_overhead_ms_per_rollout_max": round(float(overhead.max()), 1),
        "tasks_per_min_medians (runner_1, runner_c, raw)": list(medians.values()),
        "identical_generated_tokens": bool(same_tokens),
        "completion_tokens_total": int(table_1["tokens"].sum()),
    }
    width = max(len(k) for k in results)
    print("\nbench_serving: bundled SmolLM2-135M (Q4_1) on llama-cpp-python's server")
    for key, value in results.items():
        print(f"  {key:<{width}}  {value}")
    print("\nconcurrency speedup ~1: llama.cpp's server runs one completion at a time; "
          "a vLLM server batches in-flight requests, so there the speedup grows with "
          "concurrency.")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if same_tokens else 1


if __name__ == "__main__":
    sys.exit(main())
