"""The Locust user for the OpenAI protocol: what OpenAI clients of the deployment see."""

from __future__ import annotations

import json
import os
import time

from tritongen.loadtests.samples import Sample
from tritongen.loadtests.users import Prompt, _HttpUserBase, _RequestFailed


class OpenAIChatUser(_HttpUserBase):
    """Streamed chat completions with `stream_options.include_usage`, on one keep-alive connection per user.

    One `data:` event with content is one response, so TTFT and ITL are the ones an OpenAI client measures
    (chat template, frontend and SSE included). `model` is the public model name. `min_tokens` (an extension
    the frontend passes to the ensemble) keeps completion lengths equal to the other protocols' at the same load.
    """

    protocol = "openai"

    def on_start(self) -> None:
        super().on_start()
        self.headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.config.api_key_env) if self.config.api_key_env else None
        if key:
            self.headers["Authorization"] = f"Bearer {key}"

    def send(self, prompt: Prompt, sample: Sample) -> str:
        body = {"model": self.config.model, "messages": [{"role": "user", "content": prompt.text}],
                "max_completion_tokens": prompt.max_tokens, "stream": True,
                "stream_options": {"include_usage": True}, **self.params(prompt)}
        sample.send_time, sample.send_wall_ns = time.perf_counter(), time.time_ns()
        try:
            response = self.http.post("/v1/chat/completions", json.dumps(body), headers=self.headers)
        except (OSError, TimeoutError) as err:
            raise _RequestFailed(f"OpenAI chat: {type(err).__name__}: {err}") from None
        try:
            if response.status_code != 200:
                detail = response.read().decode("utf-8", errors="replace")
                raise _RequestFailed(f"OpenAI chat: {response.status_code} {detail}")
            return self._read(response, sample)
        except (OSError, TimeoutError, ValueError) as err:
            raise _RequestFailed(f"OpenAI chat: {type(err).__name__}: {err}") from None
        finally:
            response.release()

    def _read(self, response, sample: Sample) -> str:
        parts = []
        while True:
            line = response.readline(b"\n")
            if not line:
                raise _RequestFailed("OpenAI chat: the stream ended without [DONE]")
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                return "".join(parts)
            event = json.loads(data)
            if "error" in event:
                raise _RequestFailed(f"OpenAI chat: {event['error'].get('message')}")
            if event.get("usage"):
                # The server's count of the templated prompt, which is what the model processed.
                sample.input_tokens = int(event["usage"]["prompt_tokens"])
            for choice in event.get("choices", ()):
                text = (choice.get("delta") or {}).get("content")
                if text:
                    sample.mark_response()
                    parts.append(text)
