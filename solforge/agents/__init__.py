"""Agents: the planner, the workers (LLM through LiteLLM, offline search over kernel families), the
loop that ties them to compile/evaluate/score/store, and protocol.md, the one source of the rules."""
