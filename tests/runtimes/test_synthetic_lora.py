"""The synthetic runtime's token sources (native and python) with LoRA adapters: an adapter shifts the token
stream deterministically (served.synthetic.ADAPTER_SHIFT, the native source's kAdapterShift), so the adapter path
through the ensemble is checked at engine speed; an unknown task id is an error naming lora_task_id and the known
ids. Both sources give the same tokens."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from streaming_text import ROOT, grpc_responses, start_server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=["native", "python"])
def server(request, tmp_path_factory):
    from specs import render_spec
    from tritongen.demo.adapters import make_demo_adapters
    from tritongen.demo.model import make_demo_model

    tmp = tmp_path_factory.mktemp("synthetic-lora")
    model = make_demo_model(tmp / "tiny-llama")
    data = yaml.safe_load((ROOT / "examples" / "synthetic-cpu.yaml").read_text())
    data["model"].update(checkpoint=str(model), adapters=[{"name": f"lora-{k}", "path": str(p)}
                                                          for k, p in enumerate(make_demo_adapters(model, 2), 1)])
    data["synthetic"].update(source=request.param, ttft_ms=1, itl_ms=1)
    data["validation"]["load"].update(users=4, duration_s=3, warmup_s=0, input_tokens={"mean": 8, "stddev": 0},
                                      output_tokens={"mean": 8, "stddev": 0},
                                      adapters={"base": 1, "lora-1": 1, "lora-2": 2})
    (tmp / "spec.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    render_spec(tmp / "spec.yaml", tmp / "repo")
    server = start_server(tmp / "repo", tmp / "tritonserver.log")
    server.spec = tmp / "spec.yaml"
    yield server
    server.stop()


def _tokens(server, task_id: int) -> list[int]:
    inputs = {"input_ids": np.array([[20, 21, 22]], np.int32), "input_lengths": np.array([[3]], np.int32),
              "request_output_len": np.array([[8]], np.int32), "lora_task_id": np.array([[task_id]], np.uint64)}
    return [int(t) for r in grpc_responses(server.grpc_url, "tensorrt_llm", inputs)
            for t in r.as_numpy("output_ids").reshape(-1)]


def _text(server, task_id: int) -> str:
    inputs = {"text_input": np.array([["hello"]], object), "max_tokens": np.array([[8]], np.int32),
              "lora_task_id": np.array([[task_id]], np.uint64)}
    return "".join(r.as_numpy("text_output").reshape(-1)[0].decode()
                   for r in grpc_responses(server.grpc_url, "ensemble", inputs))


def test_each_adapter_has_its_own_deterministic_stream(server):
    streams = [_tokens(server, task_id) for task_id in (0, 1, 2)]
    assert len({tuple(s) for s in streams}) == 3 and all(len(s) == 8 for s in streams)
    assert _tokens(server, 1) == streams[1]
    texts = [_text(server, task_id) for task_id in (0, 1, 2)]
    assert len(set(texts)) == 3 and texts[2] == _text(server, 2)
    # The python source's rule, which the native one shares: adapter k starts ADAPTER_SHIFT x k ids further on.
    assert streams[0][0] + 97 == streams[1][0] and streams[1][0] + 97 == streams[2][0]


def test_an_unknown_task_id_is_refused_and_the_server_serves_on(server):
    with pytest.raises(RuntimeError, match=r"lora_task_id: 3 is not a LoRA adapter of this deployment; known ids: "
                                           r"0 \(the base\) to 2"):
        _tokens(server, 3)
    assert len(_tokens(server, 2)) == 8


def test_the_load_test_spreads_requests_over_adapters_and_reports_each(server, tmp_path):
    """validation.load.adapters: each request goes to an adapter drawn by weight; the report has every adapter's
    figures, summing to the level's; each adapter's text is its own (the task id reached the model)."""
    import json
    import subprocess
    import sys

    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "tritongen.cli", "loadtest", str(server.spec), "--url",
                           server.grpc_url, "--metrics-url", server.metrics_url, "--out", str(out)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    report = json.loads((out / "loadtest.json").read_text())
    level = report["levels"][0]
    adapters = level["adapters"]
    assert set(adapters) == {"base", "lora-1", "lora-2"}
    assert sum(a["request_count"] for a in adapters.values()) == level["metrics"]["request_count"] > 0
    assert sum(a["completed_count"] for a in adapters.values()) == level["metrics"]["completed_count"]
    assert all(f"{name} {a['request_count']} sent" in proc.stdout for name, a in adapters.items()), proc.stdout
    assert all(a["error_count"] == 0 and a["output_tokens_total"] > 0 for a in adapters.values())
    texts: dict[str, set[str]] = {}
    for path in report["files"]["samples"]:
        for line in open(path).read().splitlines():
            sample = json.loads(line)
            texts.setdefault(sample["adapter"], set()).add(sample["output_text"])
    # The stream follows the prompt's length (which may differ by a token) and the adapter: no text of one adapter
    # is another's.
    assert set(texts) == set(adapters) and sum(len(t) for t in texts.values()) == len(set().union(*texts.values()))
