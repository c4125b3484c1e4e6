"""One LiteLLM chat call at a time: retries with backoff, budget caps, and a log row per call.

Any LiteLLM provider works: a hosted model string ("anthropic/claude-...", "openai/gpt-..."), or a
local server speaking the OpenAI API ("openai/<name>" with api_base "http://host:port/v1": vLLM,
Ollama, llama.cpp). Keys come from the environment (LiteLLM reads OPENAI_API_KEY etc. itself) or are
passed in (resolved by the caller, e.g. a Prefect Secret block in flows/); they are never stored, and
every logged prompt/response/error is scrubbed of them.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from .prompts import scrub, secret_values

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch the cost map at import


class BudgetExceeded(RuntimeError):
    """A cap (dollars, tokens, calls) would be passed; the message names it."""


class ProviderOutage(RuntimeError):
    """The provider kept failing after every retry; the LLM worker stops cleanly."""


class ProviderRejected(RuntimeError):
    """A non-retryable error (bad request, authentication, context window): retrying cannot help."""


@dataclass
class LlmConfig:
    model: str
    api_base: Optional[str] = None
    api_key: Optional[str] = field(default=None, repr=False)  # never printed, never stored
    temperature: float = 0.2
    max_tokens: int = 8192           # per reply
    timeout_s: float = 300.0
    retries: int = 4                 # attempts after the first, on 429/5xx/connection/timeout
    backoff_s: float = 2.0           # first wait; doubles each retry
    backoff_max_s: float = 60.0
    use_tools: bool = True
    max_turns: int = 12              # model replies per session (tool turns + repair turns)
    # caps for the whole run (None: no cap)
    max_dollars: Optional[float] = None
    max_total_tokens: Optional[int] = None
    max_calls: Optional[int] = None
    # price when LiteLLM's map does not know the model (local servers): $ per token
    input_cost_per_token: float = 0.0
    output_cost_per_token: float = 0.0


@dataclass
class Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    dollars: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class LlmClient:
    """Calls the model; `on_call(row)` receives one llm_calls row per HTTP call (ok or failed)."""

    def __init__(self, cfg: LlmConfig, on_call: Optional[Callable[[dict], None]] = None,
                 sleep: Callable[[float], None] = time.sleep):
        self.cfg = cfg
        self.usage = Usage()
        self.on_call = on_call or (lambda row: None)
        self._sleep = sleep
        self._secrets = secret_values([cfg.api_key or ""])

    # ---- budget ----------------------------------------------------------------------------------
    def check_budget(self) -> None:
        c, u = self.cfg, self.usage
        if c.max_calls is not None and u.calls >= c.max_calls:
            raise BudgetExceeded(f"LLM call cap reached ({u.calls}/{c.max_calls} calls)")
        if c.max_dollars is not None and u.dollars >= c.max_dollars:
            raise BudgetExceeded(f"LLM dollar cap reached (${u.dollars:.4f}/${c.max_dollars:.4f})")
        if c.max_total_tokens is not None and u.tokens >= c.max_total_tokens:
            raise BudgetExceeded(f"LLM token cap reached ({u.tokens}/{c.max_total_tokens} tokens)")

    def _max_tokens_now(self) -> int:
        # never ask for more completion tokens than the token cap has left
        c, u = self.cfg, self.usage
        if c.max_total_tokens is None:
            return c.max_tokens
        return max(1, min(c.max_tokens, c.max_total_tokens - u.tokens))

    # ---- the call --------------------------------------------------------------------------------
    def chat(self, messages: list[dict], tools: Optional[list[dict]] = None, *,
             attempt_id: Optional[str] = None) -> dict:
        """One reply as {"content": str, "tool_calls": [{"id","name","arguments"}]}.

        Raises BudgetExceeded before a call a cap forbids, ProviderOutage after the retries are spent,
        ProviderRejected on a non-retryable error."""
        import litellm

        litellm.suppress_debug_info = True  # no "Provider List" banners on stdout
        waits = 0
        while True:
            self.check_budget()
            kwargs = dict(model=self.cfg.model, messages=messages, temperature=self.cfg.temperature,
                          max_tokens=self._max_tokens_now(), timeout=self.cfg.timeout_s,
                          # our loop retries (LiteLLM's and the OpenAI SDK's retries are off), so
                          # every HTTP call gets a log row and the backoff is ours
                          num_retries=0, max_retries=0)
            if self.cfg.api_base:
                kwargs["api_base"] = self.cfg.api_base
            if self.cfg.api_key:
                kwargs["api_key"] = self.cfg.api_key
            if tools and self.cfg.use_tools:
                kwargs["tools"] = tools
            t0 = time.perf_counter()
            try:
                resp = litellm.completion(**kwargs)
            except Exception as e:  # noqa: BLE001 - sorted below into retry / reject
                latency = time.perf_counter() - t0
                kind = classify_error(e)
                self.usage.calls += 1
                self._log(messages, None, latency, kind, error=f"{type(e).__name__}: {e}",
                          attempt_id=attempt_id)
                if kind == "rejected":
                    raise ProviderRejected(self._scrub(f"{type(e).__name__}: {e}")) from None
                if waits >= self.cfg.retries:
                    raise ProviderOutage(self._scrub(
                        f"provider failed {waits + 1} times in a row; last: {type(e).__name__}: "
                        f"{str(e)[:300]}")) from None
                delay = min(self.cfg.backoff_max_s, self.cfg.backoff_s * (2 ** waits))
                retry_after = _retry_after(e)
                if retry_after:
                    delay = min(self.cfg.backoff_max_s, max(delay, retry_after))
                waits += 1
                self._sleep(delay)
                continue
            latency = time.perf_counter() - t0
            reply, pt, ct = _reply_of(resp)
            cost = self._cost(resp, pt, ct)
            self.usage.calls += 1
            self.usage.prompt_tokens += pt
            self.usage.completion_tokens += ct
            self.usage.dollars += cost
            self._log(messages, reply, latency, "ok", attempt_id=attempt_id, prompt_tokens=pt,
                      completion_tokens=ct, cost=cost)
            return reply

    def _cost(self, resp, pt: int, ct: int) -> float:
        import litellm

        try:
            hidden = getattr(resp, "_hidden_params", {}) or {}
            c = hidden.get("response_cost")
            if c is None:
                c = litellm.completion_cost(completion_response=resp)
            if c:
                return float(c)
        except Exception:  # noqa: BLE001 - an unknown (local) model has no price in the map
            pass
        return pt * self.cfg.input_cost_per_token + ct * self.cfg.output_cost_per_token

    def _scrub(self, text: str) -> str:
        return scrub(text, self._secrets)

    def _log(self, messages, reply, latency, status, *, error: str = "", attempt_id=None,
             prompt_tokens: int = 0, completion_tokens: int = 0, cost: float = 0.0) -> None:
        row = {"model": self.cfg.model, "attempt_id": attempt_id,
               "prompt": self._scrub(json.dumps(messages, ensure_ascii=False)),
               "response": self._scrub(json.dumps(reply, ensure_ascii=False)) if reply else "",
               "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
               "cost_usd": cost, "latency_s": latency,
               "status": "error" if status == "rejected" else status,  # LlmCallStatus values
               "error": self._scrub(error)[:4000]}
        self.on_call(row)


def classify_error(e: Exception) -> str:
    """'rate_limited' | 'timeout' | 'error' (retryable) | 'rejected' (not retryable)."""
    import litellm

    ex = litellm.exceptions
    if isinstance(e, ex.RateLimitError):
        return "rate_limited"
    if isinstance(e, ex.Timeout):
        return "timeout"
    if isinstance(e, (ex.ContextWindowExceededError, ex.AuthenticationError, ex.PermissionDeniedError,
                      ex.NotFoundError, ex.BadRequestError, ex.UnprocessableEntityError)):
        return "rejected"
    code = getattr(e, "status_code", None)
    if isinstance(code, int) and 400 <= code < 500 and code not in (408, 409, 429):
        return "rejected"
    return "error"  # 5xx, connection refused/reset, anything transient


def _retry_after(e: Exception) -> Optional[float]:
    resp = getattr(e, "response", None)
    headers = getattr(resp, "headers", None)
    if not headers:
        return None
    try:
        return float(headers.get("retry-after"))
    except (TypeError, ValueError):
        return None


def _reply_of(resp) -> tuple[dict, int, int]:
    msg = resp.choices[0].message
    calls = []
    for tc in getattr(msg, "tool_calls", None) or []:
        fn = tc.function
        calls.append({"id": tc.id, "name": fn.name, "arguments": fn.arguments or "{}"})
    usage = getattr(resp, "usage", None)
    pt = int(getattr(usage, "prompt_tokens", 0) or 0)
    ct = int(getattr(usage, "completion_tokens", 0) or 0)
    return {"content": msg.content or "", "tool_calls": calls}, pt, ct


def assistant_message(reply: dict) -> dict:
    """The reply as a message to append to the conversation (OpenAI format)."""
    m: dict = {"role": "assistant", "content": reply.get("content") or ""}
    if reply.get("tool_calls"):
        # some providers reject an empty text block beside tool calls: send no text at all
        m["content"] = reply.get("content") or None
        m["tool_calls"] = [{"id": c["id"], "type": "function",
                            "function": {"name": c["name"], "arguments": c["arguments"]}}
                           for c in reply["tool_calls"]]
    return m


def resolve_api_key(env_var: Optional[str] = None, secret_block: Optional[str] = None,
                    load_secret: Optional[Callable[[str], str]] = None) -> Optional[str]:
    """The API key from an environment variable, or from a secret store by block name.

    solforge never imports Prefect: flows/ passes `load_secret=lambda n: Secret.load(n).get()` with
    the block name. None means "let LiteLLM read the provider's usual variable"."""
    if secret_block:
        if load_secret is None:
            raise ValueError(f"secret block {secret_block!r} given without a loader")
        return load_secret(secret_block)
    if env_var:
        value = os.environ.get(env_var)
        if not value:
            raise ValueError(f"environment variable {env_var} is not set")
        return value
    return None
