"""The Locust user for the OpenAI protocol: what OpenAI clients of the deployment see."""

from __future__ import annotations

import json
import os
import time

import gevent

from tritongen.loadtests.samples import Sample
from tritongen.loadtests.users import Cancelled, RequestFailed, _HttpUserBase
from tritongen.loadtests.workload import Prompt


class OpenAIChatUser(_HttpUserBase):
    """Streamed chat completions with `stream_options.include_usage`, on one keep-alive connection per user.

    One `data:` event with content is one response, so TTFT and ITL are the ones an OpenAI client measures
    (chat template, frontend and SSE included). `model` is the public model name. `min_tokens` (an extension
    the frontend passes to the ensemble) keeps completion lengths equal to the other protocols' at the same load.

    Token counts: OpenAI's stream carries no per-chunk count, only the final `usage` chunk with the server's
    total (`completion_tokens`, the frontend's sum of Triton's per-response num_output_tokens). So content chunks are
    recorded with no count, and the usage chunk is recorded as one more response, at its own arrival time,
    carrying that total: the sample's output_tokens is the server's count, and in the report's timeline a
    request's tokens land when the client learned the count (the end of the stream), not spread over it.
    """

    protocol = "openai"

    def on_start(self) -> None:
        super().on_start()
        self.headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.config.api_key_env) if self.config.api_key_env else None
        if key:
            self.headers["Authorization"] = f"Bearer {key}"

    def send(self, prompt: Prompt, sample: Sample) -> str:
        # An adapter is chosen by its name as the model (the frontend lists it in /v1/models).
        model = prompt.adapter.name if prompt.adapter is not None and prompt.adapter.task_id else self.config.model
        body = {"model": model, "messages": [{"role": "user", "content": prompt.text}],
                "max_completion_tokens": prompt.max_tokens, "stream": True,
                "stream_options": {"include_usage": True}}
        if prompt.schema is not None:
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": prompt.schema.name, "schema": prompt.schema.schema, "strict": True}}
        if self.dialect is not None and self.dialect.count_source == "client":
            # The model behind the frontend returns no counts: usage is the frontend's tokenizer count, so the
            # sample says so.
            sample.counted_by = "client"
        if prompt.min_tokens is not None and (self.dialect is None or "min_tokens" not in self.dialect.unsupported):
            body["min_tokens"] = prompt.min_tokens
        timer = None
        sample.send_time, sample.send_wall_ns = time.perf_counter(), time.time_ns()
        if prompt.cancel_after_s is not None:
            timer = gevent.Timeout(prompt.cancel_after_s, Cancelled())
            timer.start()
        response = None
        try:
            response = self.http.post("/v1/chat/completions", json.dumps(body), headers=self.headers)
            if response.status_code != 200:
                detail = response.read().decode("utf-8", errors="replace")
                raise RequestFailed(f"OpenAI chat: {response.status_code} {detail}")
            return self._read(response, sample)
        except Cancelled:
            # Closing the connection is how an HTTP client cancels: the frontend cancels its Triton request.
            self.http.close()
            self._connect()
            raise
        except (OSError, TimeoutError, ValueError) as err:
            raise RequestFailed(f"OpenAI chat: {type(err).__name__}: {err}") from None
        finally:
            if timer is not None:
                timer.close()
            if response is not None:
                response.release()

    def _read(self, response, sample: Sample) -> str:
        parts = []
        while True:
            line = response.readline(b"\n")
            if not line:
                raise RequestFailed("OpenAI chat: the stream ended without [DONE]")
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                return "".join(parts)
            at = time.perf_counter()
            event = json.loads(data)
            if "error" in event:
                raise RequestFailed(f"OpenAI chat: {event['error'].get('message')}")
            for choice in event.get("choices", ()):
                text = (choice.get("delta") or {}).get("content")
                if text:
                    sample.mark_response(at)
                    parts.append(text)
            usage = event.get("usage")
            if usage:
                # The server's counts: the templated prompt the model processed, and the completion's total.
                sample.input_tokens = int(usage["prompt_tokens"])
                sample.mark_response(at, tokens=int(usage["completion_tokens"]))
