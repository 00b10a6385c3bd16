"""mathagent: data-centric reinforcement fine-tuning of a math-solving ReAct agent.

A tutorial package around AgentScope's ReActAgent and Trinity-RFT's task selectors.
Modules are imported lazily by their users; importing ``mathagent`` itself is cheap.
"""

__version__ = "0.1.0"
