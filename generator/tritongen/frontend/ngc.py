"""Triton's own OpenAI frontend (server repo python/openai) as a deploy option: the argv that starts it.

Inside the NGC container it runs in-process with the `tritonserver` bindings and serves the repository itself,
with KServe HTTP/gRPC kept on for Triton's usual clients. Flags are those of openai_frontend/main.py on the
r26.07 branch. It calls the ensemble/BLS with its TensorRT-LLM converter, whose tensor names the rendered
repository accepts (tests/frontend/test_frontend_units.py checks them). Unlike tritongen's frontend it lists every ready
model (preprocessing too) and cannot front a remote server.
"""

from __future__ import annotations

from tritongen.plan.frontend import FrontendPlan

MAIN = "/opt/tritonserver/python/openai/openai_frontend/main.py"


def triton_frontend_command(frontend: FrontendPlan, repository: str, *, http_port: int, grpc_port: int,
                            openai_port: int) -> list[str]:
    route = frontend.models[0]
    argv = ["python3", MAIN, f"--model-repository={repository}", f"--tokenizer={route.tokenizer_dir}",
            f"--openai-port={openai_port}", "--enable-kserve-frontends", f"--kserve-http-port={http_port}",
            f"--kserve-grpc-port={grpc_port}", f"--default-max-tokens={route.default_max_tokens}"]
    if route.chat_template:
        argv.append(f"--chat-template={route.chat_template}")
    return argv
