"""A scripted OpenAI-compatible server on 127.0.0.1 for LiteLLM tests: real HTTP, real JSON.

Each POST to /v1/chat/completions takes the next step of the script:
  {"content": "..."}                        -> an assistant message
  {"tool_calls": [{"name": ..., "arguments": {...}}]}  -> an assistant message with tool calls
  {"status": 500} / {"status": 429}         -> an error response (provider outage, rate limit)
A step may repeat (`"repeat": n`). When the script runs out the server answers 500. Every request
body and its headers are kept for the test to inspect.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedLLM:
    def __init__(self, script: list[dict]):
        self.steps: list[dict] = []
        for s in script:
            self.steps.extend([s] * int(s.get("repeat", 1)))
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    def _next(self, body: dict, headers: dict) -> dict:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            i = len(self.requests) - 1
            return self.steps[i] if i < len(self.steps) else {"status": 500}

    def _handler(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_POST(self):  # noqa: N802
                n = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(n) or b"{}")
                step = outer._next(body, {k.lower(): v for k, v in self.headers.items()})
                if "status" in step:
                    code = step["status"]
                    payload = {"error": {"message": f"scripted failure {code}",
                                         "type": "server_error" if code >= 500 else "rate_limit",
                                         "code": code}}
                    return self._send(code, payload, {"retry-after": "0"} if code == 429 else {})
                msg: dict = {"role": "assistant", "content": step.get("content")}
                finish = "stop"
                if step.get("tool_calls"):
                    msg["tool_calls"] = [
                        {"id": f"call_{len(outer.requests)}_{j}", "type": "function",
                         "function": {"name": tc["name"], "arguments": json.dumps(tc.get("arguments", {}))}}
                        for j, tc in enumerate(step["tool_calls"])]
                    finish = "tool_calls"
                prompt_tokens = sum(len(str(m.get("content") or "")) for m in body.get("messages", [])) // 4
                completion_tokens = max(1, len(json.dumps(msg)) // 4)
                self._send(200, {
                    "id": f"chatcmpl-{len(outer.requests)}", "object": "chat.completion",
                    "created": 0, "model": body.get("model", "scripted"),
                    "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                              "total_tokens": prompt_tokens + completion_tokens}})

            def _send(self, code: int, payload: dict, headers: dict | None = None):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        return Handler
