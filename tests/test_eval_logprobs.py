"""The ``trinity-eval-no-logprobs`` lever (:mod:`mathagent.eval_logprobs`): with it, Trinity-RFT
0.6.0's own AgentScope workflow adapter sends an evaluation task's requests without
log-probabilities and a training task's with them, and both tasks still end with their reward,
metrics and an experience; without it, both ask for them.

What is real: Trinity's ``AgentScopeWorkflowAdapterV1``, ``Task`` and ``ModelWrapper`` (its
OpenAI client that records each reply as an experience), the package's ReAct workflow and
judge, AgentScope's chat model and the OpenAI client. vLLM cannot run here, so the server is a
stand-in that answers every chat request as vLLM's OpenAI server would (the reply's and the
prompt's token ids, log-probabilities only where asked for) and keeps each request's body.
Each check runs in a fresh interpreter, since a fix patches the whole process.
"""

from __future__ import annotations

import pytest
from fresh_python import VLLM_STAND_IN, run_python, wrong_versions

from mathagent import eval_logprobs

WRONG_VERSIONS = wrong_versions()

CHECK = """
    import asyncio, http.server, json, os, threading
    from trinity.common.config import GenerationConfig, InferenceModelConfig
    from trinity.common.models.model import ModelWrapper
    from trinity.common.workflows.agentscope_workflow import AgentScopeWorkflowAdapterV1
    from trinity.common.workflows.workflow import Task
    from mathagent import compat
    from mathagent.agent import run_react_agent
    from mathagent.judge import gsm8k_judge

    REQUESTS = []

    class Server(http.server.BaseHTTPRequestHandler):
        \"\"\"Stands for vLLM's OpenAI server: one reply, its token ids, log-probabilities
        only where the request asks for them.\"\"\"

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            REQUESTS.append(body)
            tokens = [11, 12, 13]
            choice = {"index": 0, "finish_reason": "stop", "token_ids": tokens,
                      "message": {"role": "assistant", "content": "So 3 + 4 = \\\\boxed{7}."}}
            if body.get("logprobs"):
                choice["logprobs"] = {"content": [
                    {"token": str(t), "logprob": -0.5, "bytes": None, "top_logprobs": []}
                    for t in tokens]}
            reply = json.dumps({"id": "x", "object": "chat.completion", "created": 0,
                                "model": body["model"], "choices": [choice],
                                "prompt_token_ids": [1, 2, 3, 4],
                                "usage": {"prompt_tokens": 4, "completion_tokens": 3,
                                          "total_tokens": 7}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def run(is_eval):
        config = InferenceModelConfig(model_path="qwen", engine_type="external",
                                      enable_openai_api=True, enable_history=True)
        model = ModelWrapper(config=config,
                             api_address=f"http://127.0.0.1:{server.server_address[1]}")
        task = Task(workflow=AgentScopeWorkflowAdapterV1, repeat_times=1, is_eval=is_eval,
                    rollout_args=GenerationConfig(temperature=1.0, logprobs=0, max_tokens=64),
                    workflow_args={"workflow_func": run_react_agent, "judge_func": gsm8k_judge},
                    raw_task={"question": "What is 3 + 4?", "answer": "#### 7"})
        before = len(REQUESTS)
        exps = asyncio.run(task.to_workflow(model).run_async())
        asked = [("logprobs" in r and r["logprobs"], "top_logprobs" in r)
                 for r in REQUESTS[before:]]
        return {"asked": asked, "rewards": [e.reward for e in exps],
                "logprobs": [len(e.logprobs) for e in exps],
                "accuracy": exps[-1].metrics.get("accuracy")}

    out = {"without": {"eval": run(True), "train": run(False)}}
    os.environ["MATHAGENT_EVAL_NO_LOGPROBS"] = "1"
    out["status"] = {r.name: r.status for r in compat.apply_all()}
    out["with"] = {"eval": run(True), "train": run(False)}
    emit(out)
"""


@pytest.mark.skipif(WRONG_VERSIONS is not None, reason=str(WRONG_VERSIONS))
def test_evaluation_requests_ask_for_no_logprobs_with_the_lever_and_training_ones_still_do():
    out, _ = run_python(VLLM_STAND_IN, CHECK, timeout=300)
    assert out["status"]["trinity-eval-no-logprobs"] == "applied"
    asked_for = {"asked": [[True, True]], "rewards": [1.0], "logprobs": [3], "accuracy": 1.0}
    assert out["without"] == {"eval": asked_for, "train": asked_for}
    assert out["with"] == {
        "eval": {"asked": [[False, False]], "rewards": [1.0], "logprobs": [0], "accuracy": 1.0},
        "train": asked_for}


def test_only_the_logprobs_settings_change_and_the_workflows_own_dict_is_kept():
    kwargs = {"temperature": 1.0, "max_tokens": 64, "logprobs": True, "top_logprobs": 0}
    assert eval_logprobs.without_logprobs(kwargs) == {"temperature": 1.0, "max_tokens": 64,
                                                      "logprobs": False}
    assert kwargs["logprobs"] is True and kwargs["top_logprobs"] == 0
