"""Whole agent conversations of the Qwen policy with its sandboxed Python tool, for reading.

Runs the ReAct workflow (the sandboxed tool on, tool calls written as text taken; AgentScope's
meta tool off unless ``--meta-tool``) against an OpenAI-compatible endpoint on a few tasks of
each level of a taskset split, keeps every message (tool calls and their results included)
and the judge's verdict, one JSON object per run:

    python scripts/gpu/qwen_transcripts.py --base-url URL --model NAME --out FILE.jsonl

Notebook 02 reads such a file (results/qwen_features/transcripts_python_tool.jsonl) to show a run where
the agent called the tool and used its result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from mathagent import paths
from mathagent.agent import AgentOptions, build_model, run_with_transcript
from mathagent.judge import gsm8k_judge
from mathagent.serving import ModelSettings
from mathagent.tasks import read_split


async def one(task: dict, settings: ModelSettings, seed: int, options: AgentOptions) -> dict:
    model = build_model(settings, seed=seed)
    start = time.perf_counter()
    try:
        transcript = await run_with_transcript(task, model, options)
    except Exception as exc:  # one failed run (e.g. a context overflow) must not lose the rest
        return {"task_id": task["task_id"], "difficulty": int(task["difficulty"]),
                "question": task["question"], "seed": seed, "error": repr(exc)[:500]}
    verdict = await gsm8k_judge(task, transcript.output.response)
    return {"task_id": task["task_id"], "difficulty": int(task["difficulty"]),
            "question": task["question"], "answer": task["answer"], "seed": seed,
            "reward": float(verdict.reward), "seconds": round(time.perf_counter() - start, 2),
            "sys_prompt": transcript.sys_prompt,
            "messages": [m.to_dict() for m in transcript.messages]}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--taskset", type=Path, default=paths.DATA_DIR / "arithmetic_qwen")
    parser.add_argument("--split", default="test")
    parser.add_argument("--per-level", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--meta-tool", action="store_true",
                        help="also offer AgentScope's meta tool, as the upstream agent does")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    settings = ModelSettings(base_url=args.base_url, api_key="EMPTY", model=args.model,
                             temperature=1.0, max_tokens=args.max_tokens)
    options = AgentOptions(python_tool=True, text_tool_calls=True, meta_tool=args.meta_tool,
                           console_output=False)
    frame = read_split(args.taskset, args.split)
    picked = frame.groupby("difficulty", group_keys=False).head(args.per_level)
    tasks = picked.to_dict("records")
    rows = await asyncio.gather(*(one(t, settings, seed, options)
                                  for seed, t in enumerate(tasks)))
    args.out.write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))
    print(f"{len(rows)} transcripts -> {args.out}; mean reward "
          f"{sum(r.get('reward', 0.0) for r in rows) / len(rows):.2f}")


if __name__ == "__main__":
    asyncio.run(main())
