"""How much load one Locust process of `tritongen loadtest` can generate: CPU time per request, top request rate.

Target: a stand-in for Triton's gRPC ModelStreamInfer, started here in its own process, that answers every
request at once with `--tokens` streamed responses (one text piece each, the last flagged
triton_final_response), exactly the wire format tritonserver sends. A real deployment would measure the model:
the tiny CPU deployment tops out at its own decode-step rate long before Locust does, so it cannot show where the
Locust process saturates. The users, the tokenizer counting and the sample writing are the real ones
(generator/tritongen/loadtests/users.py, GrpcStreamUser), so the figures are what a load test pays per request.

Per concurrency level, the Locust process's own CPU time between test start and test stop (a listener added
with a second `-f` file records getrusage) is divided by the requests it completed. The highest rate is the best
level's request rate; when Locust's CPU use there is near 100% of one core, that is Locust's ceiling on this
machine (when it is not, the stand-in server was the limit).

    .venv/bin/python bench/locust_capacity.py [--levels 1,8,32,128] [--duration 8] [--tokens 8]

Prints a table and writes bench/results/locust_capacity.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import struct
import subprocess
import sys
import tempfile
from concurrent import futures
from pathlib import Path

from tritongen.demo.model import make_demo_model
from tritongen.loadtests.samples import read_samples, sample_files
from tritongen.loadtests.workload import LocustConfig
from tritongen.plan.load import load_profile
from tritongen.ports import free_port
from tritongen.spec import LoadSection

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROBE = '''
import json, os, resource, time
from locust import events

def _cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

_start = {}

@events.test_start.add_listener
def _on_start(environment, **kwargs):
    _start.update(cpu=_cpu(), wall=time.perf_counter())

@events.test_stop.add_listener
def _on_stop(environment, **kwargs):
    with open(os.environ["CAPACITY_PROBE_OUT"], "w") as f:
        json.dump({"cpu_s": _cpu() - _start["cpu"], "wall_s": time.perf_counter() - _start["wall"],
                   "requests": environment.stats.total.num_requests,
                   "failures": environment.stats.total.num_failures}, f)
'''


def serve_stub(port: int, tokens: int, ready) -> None:
    """A ModelStreamInfer server that streams `tokens` responses per request, immediately."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    piece = b" tok"
    raw = struct.pack("<I", len(piece)) + piece

    def response(request_id: str, final: bool):
        r = service_pb2.ModelInferResponse(model_name="ensemble", model_version="1", id=request_id)
        out = r.outputs.add()
        out.name, out.datatype = "text_output", "BYTES"
        out.shape.extend([1, 1])
        r.raw_output_contents.append(raw)
        r.parameters["triton_final_response"].bool_param = final
        return service_pb2.ModelStreamInferResponse(infer_response=r)

    class Stub(service_pb2_grpc.GRPCInferenceServiceServicer):
        def ModelStreamInfer(self, request_iterator, context):  # noqa: N802 - the gRPC method name
            for request in request_iterator:
                for i in range(tokens):
                    yield response(request.id, i == tokens - 1)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=256),
                         options=[("grpc.max_concurrent_streams", 1024)])
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(Stub(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    ready.set()
    server.wait_for_termination()


def run_level(users: int, args: argparse.Namespace, url: str, tokenizer: str, work: Path) -> dict:
    level_dir = work / f"u{users}"
    load = LoadSection(users=users, duration_s=args.duration, protocol="grpc", input_tokens={"mean": 32},
                       output_tokens={"mean": args.tokens})
    config = LocustConfig(profile=load_profile(load, Path), url=url, level=users,
                          samples_dir=str(level_dir / "samples"), tokenizer_dir=tokenizer, timeout_s=30.0)
    level_dir.mkdir(parents=True)
    (level_dir / "config.json").write_text(config.to_json())
    probe_out = level_dir / "probe.json"
    env = dict(os.environ, TRITONGEN_LOADTEST_CONFIG=str(level_dir / "config.json"),
               CAPACITY_PROBE_OUT=str(probe_out), TOKENIZERS_PARALLELISM="false")
    cmd = [sys.executable, "-m", "locust", "-f", f"{ROOT / 'loadtests' / 'locustfile.py'},{work / 'probe.py'}",
           "--headless", "-u", str(users), "-r", str(users), "-t", f"{args.duration}s", "--only-summary",
           "--stop-timeout", "30", "--loglevel", "WARNING"]
    with open(level_dir / "locust.log", "wb") as log:
        subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=False, timeout=args.duration + 120)
    probe = json.loads(probe_out.read_text())
    samples = read_samples(sample_files(level_dir / "samples"))
    ok = [s for s in samples if s.ok]
    start = min(s.start_wall_s for s in samples)
    end = max(s.end_wall_s for s in samples)
    return {"users": users, "requests": len(samples), "failures": len(samples) - len(ok),
            "req_per_s": len(ok) / (end - start), "responses_per_s": sum(len(s.response_times) for s in ok) / (end - start),
            "locust_cpu_s": probe["cpu_s"], "locust_wall_s": probe["wall_s"],
            "locust_cpu_util": probe["cpu_s"] / probe["wall_s"],
            "cpu_ms_per_request": 1e3 * probe["cpu_s"] / max(1, probe["requests"]),
            "e2e_p50_ms": sorted(s.response_times[-1] for s in ok)[len(ok) // 2] * 1e3 if ok else None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--levels", default="1,8,32,128", help="comma-separated user counts")
    p.add_argument("--duration", type=int, default=8, help="seconds per level")
    p.add_argument("--tokens", type=int, default=8, help="streamed responses per request")
    p.add_argument("--tokenizer", help="tokenizer folder (default: build/tiny-llama, made if missing)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "locust_capacity.json"))
    args = p.parse_args()

    tokenizer = args.tokenizer or str(ROOT / "build" / "tiny-llama")
    if not Path(tokenizer, "tokenizer.json").is_file():
        tokenizer = str(make_demo_model(tokenizer))
    port = free_port()
    ready = multiprocessing.Event()
    stub = multiprocessing.Process(target=serve_stub, args=(port, args.tokens, ready), daemon=True)
    stub.start()
    if not ready.wait(30):
        raise SystemExit("the stand-in gRPC server did not start")
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="locust-capacity-") as tmp:
            work = Path(tmp)
            (work / "probe.py").write_text(PROBE)
            for users in (int(x) for x in args.levels.split(",")):
                rows.append(run_level(users, args, f"127.0.0.1:{port}", tokenizer, work))
                r = rows[-1]
                print(f"u={r['users']:>4}: {r['req_per_s']:8.1f} req/s, locust CPU {100 * r['locust_cpu_util']:5.1f}%, "
                      f"{r['cpu_ms_per_request']:.2f} ms CPU/request", flush=True)
    finally:
        stub.terminate()
        stub.join(10)

    best = max(rows, key=lambda r: r["req_per_s"])
    at_saturation = [r for r in rows if r["locust_cpu_util"] >= 0.8]
    cpu_ms = (at_saturation or rows)[-1]["cpu_ms_per_request"]
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "target": f"stand-in gRPC ModelStreamInfer server, {args.tokens} streamed responses per request",
        "protocol": "grpc", "duration_s_per_level": args.duration, "levels": rows,
        "max_req_per_s": best["req_per_s"], "max_req_per_s_users": best["users"],
        "max_req_per_s_locust_cpu_util": best["locust_cpu_util"],
        "cpu_ms_per_request": cpu_ms, "ceiling_req_per_s_one_core": 1e3 / cpu_ms,
    }
    print()
    print(f"{'users':>5} {'req/s':>9} {'resp/s':>9} {'locust CPU':>10} {'CPU ms/req':>10} {'e2e p50 ms':>10} {'fails':>6}")
    for r in rows:
        print(f"{r['users']:>5} {r['req_per_s']:>9.1f} {r['responses_per_s']:>9.0f} {100 * r['locust_cpu_util']:>9.1f}% "
              f"{r['cpu_ms_per_request']:>10.2f} {r['e2e_p50_ms'] or 0:>10.2f} {r['failures']:>6}")
    print(f"\nhighest rate: {best['req_per_s']:.0f} req/s at {best['users']} users "
          f"(Locust CPU {100 * best['locust_cpu_util']:.0f}% of one core); "
          f"{cpu_ms:.2f} ms Locust CPU per request -> ceiling ~{1e3 / cpu_ms:.0f} req/s per Locust process")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
