"""The endpoint, agent and batching settings of ``run-agent`` and ``measure-pass-rates``.

Each setting is declared once, as a dataclass field; :func:`add_rollout_flags` derives the
command-line flags, one argument group per part, and :func:`mathagent.settings.from_flags`
reads them back. The parts are shared by both commands; where the commands differ (one
endpoint or several, the default temperature) a part has a variant, and each command's
schema (:class:`RunAgentSettings`, :class:`MeasureSettings`) combines its variants into one
flat dataclass, so a setting reads as ``settings.temperature`` whichever part declares it.

Settings whose default is decided when the command runs (from the environment or from
whether an endpoint was given) are ``None`` here and say so in their help; the others show
their default.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from mathagent.settings import add_flags, setting


@dataclass
class EndpointChoice:
    """Which endpoint and model; left out, the environment's, else the bundled model."""

    base_url: str | None = setting(
        None, flag=True, metavar="URL",
        help="OpenAI-compatible base URL ending in /v1 (default: $MATHAGENT_BASE_URL, else a "
             "local llama.cpp server)")
    api_key: str | None = setting(None, flag=True, metavar="API_KEY",
                                  help="API key (default: $MATHAGENT_API_KEY)")
    model: str | None = setting(None, flag=True, metavar="MODEL",
                                help="served model name (default: $MATHAGENT_MODEL or the "
                                     "bundled model)")


@dataclass
class SeveralEndpoints(EndpointChoice):
    """:class:`EndpointChoice` with one or more base URLs (used in parallel through Ray)."""

    base_url: list[str] | None = setting(
        None, flag=True, metavar="URL",
        help="OpenAI-compatible base URL(s) ending in /v1 (default: $MATHAGENT_BASE_URL, else "
             "a local llama.cpp server); several URLs (one vLLM server per GPU) are used in "
             "parallel through Ray")


@dataclass
class Decoding:
    """How replies are sampled, and the local server's context length."""

    temperature: float = setting(0.0, flag=True, metavar="TEMPERATURE",
                                 help="sampling temperature")
    max_tokens: int = setting(512, flag=True, metavar="MAX_TOKENS",
                              help="reply length limit per model call; the upstream Qwen3 runs "
                                   "use 16384")
    n_ctx: int = setting(2048, flag=True, metavar="N_CTX",
                         help="context length of the local server")


@dataclass
class MeasureDecoding(Decoding):
    """:class:`Decoding` sampling at temperature 1 (pass rates are over sampled replies)."""

    temperature: float = setting(1.0, flag=True, metavar="TEMPERATURE",
                                 help="sampling temperature")


@dataclass
class AgentJudge:
    """The agent's prompt and tool, and the judge's reading of a reply."""

    prompt_variant: str = setting(
        "reference", flag=True, choices=["reference", "single_braces"],
        help="system prompt: the upstream one with its doubled braces (reference) or with "
             "single braces")
    python_tool: bool = setting(
        False, flag=True,
        help="give the agent execute_python_code, which runs model-written code in "
             "mathagent.sandbox (a limited child process: no network, no new processes, "
             "writes only in its own temporary folder)")
    tool_timeout: float = setting(10.0, flag=True, metavar="TOOL_TIMEOUT",
                                  help="wall-clock seconds per code execution")
    text_tool_calls: bool = setting(
        False, flag=True,
        help="also take tool calls the model wrote as JSON in its reply's text "
             "(mathagent.text_tool_calls; small models rarely use their template's format)")
    meta_tool: bool = setting(
        True, flag=True,
        help="offer AgentScope's meta tool reset_equipped_tools, as the upstream agent does "
             "(--no-meta-tool with no --python-tool: the requests offer no tools)")
    lenient: bool = setting(
        False, flag=True,
        help="also accept the last number of a reply (the upstream boxed-answer judge does "
             "not)")


@dataclass
class Concurrency:
    """Rollouts in flight per endpoint; left out, chosen by the kind of endpoint."""

    concurrency: int | None = setting(
        None, flag=True, metavar="CONCURRENCY",
        help="rollouts in flight per endpoint (default: 4 for the local server, 32 for a "
             "given endpoint, meant for vLLM; a llama.cpp server answers one request at a "
             "time and time spent in its queue counts against --timeout)")


@dataclass
class Batching:
    """Each rollout's time limit, the base seed, and whether reply texts are kept."""

    timeout: float = setting(300.0, flag=True, metavar="TIMEOUT",
                             help="seconds per rollout before it counts as failed")
    seed: int = setting(0, flag=True, metavar="SEED", help="base seed")
    responses: bool = setting(
        True, flag="--responses",
        help="store reply texts (--no-responses: rewards and answers only)")


@dataclass
class RunAgentSettings(Batching, Concurrency, AgentJudge, Decoding, EndpointChoice):
    """The endpoint, agent and batching settings of ``run-agent``."""


@dataclass
class MeasureSettings(Batching, Concurrency, AgentJudge, MeasureDecoding, SeveralEndpoints):
    """The endpoint, agent and batching settings of ``measure-pass-rates``."""


# Argument groups: (title, ((part, whether its help shows the defaults), ...)). A part is
# the base class of a command's schema; a command's variant of it (a subclass) is used.
_GROUPS = (
    ("model endpoint (default: start the bundled model)",
     ((EndpointChoice, False), (Decoding, True))),
    ("agent and judge (endpoint backend)", ((AgentJudge, True),)),
    ("batching", ((Concurrency, False), (Batching, True))),
)


def _part(schema: type, base: type) -> type:
    """The class among ``schema``'s bases that declares ``base``'s fields for it."""
    return next(c for c in schema.__mro__[1:] if issubclass(c, base))


def add_rollout_flags(parser: argparse.ArgumentParser, schema: type) -> None:
    """The flags of ``schema`` (:class:`RunAgentSettings` or :class:`MeasureSettings`)."""
    for title, parts in _GROUPS:
        group = parser.add_argument_group(title)
        for base, show_defaults in parts:
            add_flags(group, _part(schema, base), show_defaults=show_defaults)
