"""Recorded agent conversations (``results/qwen_features/``, recorded on a GPU) read back for notebook 02:
a summary per run and one run's turns, tool calls and tool results included."""

from __future__ import annotations

import json

import pytest

from mathagent import agent, paths


def _run(task_id, reward, messages):
    return {"task_id": task_id, "difficulty": 0, "question": "What is 8 minus 5?",
            "answer": "#### 3", "seed": 0, "reward": reward, "sys_prompt": "Solve it.",
            "messages": messages}


CALLED = _run("t1", 0.0, [
    {"role": "user", "name": "user", "content": "What is 8 minus 5?"},
    {"role": "assistant", "name": "react_agent", "content": [
        {"type": "text", "text": "Let me compute."},
        {"type": "tool_use", "id": "c1", "name": "execute_python_code",
         "input": {"code": "8 - 5"}}]},
    {"role": "system", "name": "system", "content": [
        {"type": "tool_result", "id": "c1", "name": "execute_python_code",
         "output": [{"type": "text", "text": "Exit status 0.\nstdout:\n3"}]}]},
    {"role": "assistant", "name": "react_agent",
     "content": [{"type": "text", "text": "\\boxed{3}"}]}])
PLAIN = _run("t2", 1.0, [
    {"role": "user", "name": "user", "content": "What is 8 minus 5?"},
    {"role": "assistant", "name": "react_agent",
     "content": [{"type": "text", "text": "8 - 5 = 3, \\boxed{3}"}]}])


def test_summary_counts_tool_calls_and_keeps_the_last_reply(tmp_path):
    file = tmp_path / "t.jsonl"
    file.write_text("\n".join(json.dumps(r) for r in (CALLED, PLAIN)) + "\n\n")
    runs = agent.read_transcripts(file)
    summary = agent.recorded_summary(runs)
    assert summary["task_id"].tolist() == ["t1", "t2"]
    assert summary["tool_calls"].tolist() == [1, 0]
    assert summary["messages"].tolist() == [4, 2]
    assert summary["last_reply"].tolist() == ["\\boxed{3}", "8 - 5 = 3, \\boxed{3}"]
    assert summary["reward"].tolist() == [0.0, 1.0]


def test_a_runs_turns_show_the_call_and_what_the_tool_returned():
    table = agent.recorded_transcript_table(CALLED)
    assert table["role"].tolist() == ["system", "user", "assistant", "system", "assistant"]
    assert table.loc[2, "tool_calls"] == "execute_python_code({'code': '8 - 5'})"
    assert table.loc[3, "text"] == "Exit status 0.\nstdout:\n3"
    assert table.loc[1, "text"] == "What is 8 minus 5?"


def test_a_line_that_is_not_json_is_named(tmp_path):
    file = tmp_path / "t.jsonl"
    file.write_text(json.dumps(PLAIN) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"t\.jsonl: line 2: not valid JSON"):
        agent.read_transcripts(file)


def test_the_recorded_qwen_runs_hold_a_tool_call_whose_result_came_back():
    """The committed record that notebook 02 shows: the sandbox ran the model's code and the
    result reached the model (``Exit status 0``)."""
    runs = agent.read_transcripts(paths.RESULTS_DIR / "qwen_features" /
                                  "transcripts_python_tool.jsonl")
    summary = agent.recorded_summary(runs)
    used = runs[int(summary.index[summary.tool_calls > 0][0])]
    table = agent.recorded_transcript_table(used)
    assert table["tool_calls"].str.contains("execute_python_code").any()
    assert table["text"].str.startswith("Exit status 0.").any()
