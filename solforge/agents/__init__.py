"""Agents: the planner, the workers (LLM through LiteLLM, offline search over kernel families), the lab
they work at (check, compile, the evaluation job, roofline, scores), and protocol.md, the one source
of the rules. The loop that ties them to compile/evaluate/score/store is solforge.orchestrate.loop."""
