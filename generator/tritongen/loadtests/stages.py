"""Where the time goes: a level's server time per request split into stages, from Triton's statistics extension
and the models' own timings, read at the edges of the same measurement window as the client's numbers.

Stages, per request of the model the load test calls (the ensemble, tensorrt_llm_bls or the runtime's own model),
each from one source and none overlapping another:
- `frontend`: what the OpenAI frontend adds (its tritongen_openai_added_latency_seconds); only for protocol openai.
- `queue`: Triton's queue time of every model on the path (ensemble, tensorrt_llm_bls, preprocessing,
  tensorrt_llm, postprocessing), summed.
- `preprocessing`: Triton's compute time (input + infer + output) of the tokenizer model.
- `first token`: the LLM model's own time from a request's arrival to its first response
  (tritongen_llm_first_response_us_total / tritongen_llm_finished_requests_total).
- `per-token`: the LLM model's own time from the first to the last response (tritongen_llm_generation_us_total),
  i.e. per-token time x (output tokens - 1); `per_token_ms` is that time over the tokens it spans.
- `detokenizer`: Triton's compute time of the postprocessing model (NVIDIA's ensemble, one call per response);
  tritongen's BLS detokenises inside tensorrt_llm_bls, so there it is part of `ensemble/BLS`.
- `ensemble/BLS`: the rest of the ensemble's request time (Triton's, receipt to final response) after the stages
  above: scheduling, the BLS's own work and detokenisation, response forwarding. Only when the ensemble is called:
  a decoupled python model's Triton request time is its execute() call, not the request.
The decoupled models' own compute times (tensorrt_llm, tensorrt_llm_bls) are not stages: their execute() returns
while the request goes on, so the time would overlap the stages above. `sum_ms` is the sum of the available
stages; compared with the client's mean end-to-end latency it shows what the server accounts for. A value no
server could have measured (a wrapped counter) is dropped and said so.

Adding up. The client's mean e2e it is compared with is over the requests that completed between the same two
reads of the server (report.py), not over the client's window: the reads are the scrapes nearest the window's edges,
up to a second outside it, and a short window's requests then differ from the server's (warm-up or drain requests
in one set and not the other), which made the sum read 51% or 140% of a mismatched mean. When the stages still
differ from that mean by more than TOLERANCE, `coverage` names what is not measured and why: with the ensemble
called, everything inside Triton's request time is a stage (what the model does not time is in `ensemble/BLS`), so
the rest lies outside it: the network, Triton's gRPC/HTTP frontend and the client's own scheduling (large when the
load generator's host is loaded: levels[].host); with a model called directly, also the stages that have no value
(named with their notes); above the mean, the stages describe other requests than the client's (another client, a
warm-up request) or overlap.
"""

from __future__ import annotations

from collections.abc import Sequence

from tritongen.loadtests.model_stats import ModelWindow, window

ENSEMBLE, BLS, PRE, LLM, POST = "ensemble", "tensorrt_llm_bls", "preprocessing", "tensorrt_llm", "postprocessing"
PATH = (ENSEMBLE, BLS, PRE, LLM, POST)
ORDER = ("frontend", "queue", "preprocessing", "first token", "per-token", "detokenizer", "ensemble/BLS")
OWN = {"first": "tritongen_llm_first_response_us_total", "generation": "tritongen_llm_generation_us_total",
       "later": "tritongen_llm_later_tokens_total", "finished": "tritongen_llm_finished_requests_total"}
FRONTEND_ADDED = "tritongen_openai_added_latency_seconds"
TOLERANCE = 0.10
"""How far the stages' sum may be from the client's mean e2e before `coverage` says why."""


def _delta(before, after, name: str) -> float | None:
    """Summed difference of every series named `name` (restart-aware); None when the server exports none."""
    keys = [k for k in after.values if k[0] == name]
    if not keys:
        return None
    total = 0.0
    for key in keys:
        a, b = after.values[key], before.values.get(key)
        total += a if b is None or a < b else a - b
    return total


def _stage(name: str, ms: float | None, source: str, note: str = "") -> dict:
    return {"name": name, "ms": ms, "source": source, "note": note}


def _own_timings(before, after) -> tuple[float | None, float | None, float | None, str]:
    """(first token ms, per-token stage ms, per-token ms) from the LLM model's own counters, and a note."""
    d = {k: _delta(before, after, name) for k, name in OWN.items()}
    if d["finished"] is None:
        return None, None, None, "the model exports no own timings (tritongen_llm_*_us_total)"
    if not d["finished"]:
        return None, None, None, "no request finished inside the window"
    first = d["first"] / d["finished"] / 1e3
    generation = d["generation"] / d["finished"] / 1e3
    per_token = d["generation"] / d["later"] / 1e3 if d["later"] else None
    return first, generation, per_token, ""


def _called(models: dict[str, ModelWindow], called: str | None) -> ModelWindow | None:
    if called in models and models[called].requests:
        return models[called]
    return next((models[m] for m in (ENSEMBLE, BLS, LLM) if m in models and models[m].requests), None)


def breakdown(before, after, client_e2e_ms: float | None, *, called: str | None = None,
              frontend: Sequence = ()) -> dict | None:
    """`levels[].stages` (docs/loadtest-report.md) from two prom.Snapshots carrying Triton's statistics, the
    client's mean e2e latency over the same window, the model the users call, and (protocol openai) two scrapes of
    the frontend's /metrics; None when the statistics were not read."""
    if before is None or after is None or before.models is None or after.models is None:
        return None
    models = window(before.models, after.models)
    outer = _called(models, called)
    notes = [f"{m.model}: {m.note}" for m in models.values() if not m.plausible]
    if outer is None:
        return {"called_model": called, "requests": 0, "stages": [], "per_token_ms": None, "sum_ms": None,
                "client_e2e_ms": client_e2e_ms, "sum_over_client_e2e": None, "unaccounted_ms": None,
                "coverage": "", "dominant": None, "models": [vars(m) for m in models.values()],
                "note": "; ".join(["no request of the called model succeeded inside the window", *notes])}
    n = outer.requests

    def per_outer(model: str, attr: str | tuple[str, ...]) -> float | None:
        """A model's time per request of the called model (postprocessing runs once per response)."""
        m = models.get(model)
        if m is None or not m.requests:
            return None
        values = [getattr(m, a) for a in ((attr,) if isinstance(attr, str) else attr)]
        if any(v is None for v in values):
            return None
        return sum(values) * m.requests / n

    stages = []
    if frontend:
        f0, f1 = frontend[0], frontend[-1]
        total, count = _delta(f0, f1, FRONTEND_ADDED + "_sum"), _delta(f0, f1, FRONTEND_ADDED + "_count")
        stages.append(_stage("frontend", total / count * 1e3 if total is not None and count else None, "frontend",
                             "" if count else "the frontend counted no request in the window"))
    on_path = [m for m in PATH if m in models and models[m].requests]
    queues = [per_outer(m, "queue_ms") for m in on_path]
    stages.append(_stage("queue", None if any(q is None for q in queues) else sum(queues), "triton",
                         "Triton queue time of " + ", ".join(on_path)))
    compute = ("compute_input_ms", "compute_infer_ms", "compute_output_ms")
    pre = per_outer(PRE, compute)
    stages.append(_stage("preprocessing", pre, "triton", "" if pre is not None else
                         "not on this path" if PRE not in on_path else "implausible statistics"))
    first, generation, per_token, own_note = _own_timings(before, after)
    stages.append(_stage("first token", first, "tritongen", own_note))
    stages.append(_stage("per-token", generation, "tritongen",
                         own_note or ("" if per_token is None else f"{per_token:.3f} ms x (output tokens - 1)")))
    post = per_outer(POST, compute)
    stages.append(_stage("detokenizer", post, "triton", "" if post is not None else
                         "inside tensorrt_llm_bls (tritongen's BLS detokenises): part of ensemble/BLS"
                         if POST not in on_path else "implausible statistics"))
    if outer.model == ENSEMBLE and outer.request_ms is not None:
        inner = [s["ms"] for s in stages if s["name"] not in ("frontend",)]
        rest = outer.request_ms - sum(v for v in inner if v is not None)
        if rest < 0:
            stages.append(_stage("ensemble/BLS", 0.0, "derived", f"the stages inside exceed the ensemble's request "
                                 f"time by {-rest:.2f} ms (they overlap or straddle the window's edges)"))
        else:
            stages.append(_stage("ensemble/BLS", rest, "derived", "ensemble request time (Triton) minus the stages "
                                 "inside it" + ("; it holds the first-token and per-token time, which the model "
                                                "does not report" if first is None else "")))
    else:
        stages.append(_stage("ensemble/BLS", None, "derived", f"{outer.model} is called directly: Triton's request "
                             "time of a decoupled model is not the request's"))
    known = [s for s in stages if s["ms"] is not None]
    total = sum(s["ms"] for s in known) if known else None
    dominant = max(known, key=lambda s: s["ms"])["name"] if known else None
    gap = client_e2e_ms - total if total is not None and client_e2e_ms else None
    return {"called_model": outer.model, "requests": n, "stages": stages, "per_token_ms": per_token,
            "sum_ms": total, "client_e2e_ms": client_e2e_ms,
            "sum_over_client_e2e": total / client_e2e_ms if total is not None and client_e2e_ms else None,
            "unaccounted_ms": gap, "coverage": coverage(stages, gap, client_e2e_ms),
            "dominant": dominant, "models": [vars(m) for m in models.values()], "note": "; ".join(notes)}


def coverage(stages: list[dict], gap: float | None, client_e2e_ms: float | None) -> str:
    """Empty when the stages add up to the client's mean e2e within TOLERANCE; else what is not measured, and why."""
    if gap is None or not client_e2e_ms:
        return "" if client_e2e_ms else "no client e2e to compare with (no request completed between the reads)"
    share = gap / client_e2e_ms
    if abs(share) <= TOLERANCE:
        return ""
    if gap < 0:
        return (f"the stages exceed the client's mean e2e by {-share:.0%} ({-gap:.1f} ms): they are averages over "
                "what the server finished between its reads, which held requests the client did not time (another "
                "client, a warm-up request), or stages overlap")
    inside = any(s["name"] == "ensemble/BLS" and s["ms"] is not None for s in stages)
    missing = [f"{s['name']} ({s['note']})" for s in stages if s["ms"] is None and s["note"]
               and s["note"] != "not on this path" and not s["note"].startswith("inside tensorrt_llm_bls")]
    outside = ("outside Triton's request time: the network, Triton's gRPC/HTTP frontend and the client's own "
               "scheduling (large when the load generator's host is loaded; see the host line)")
    where = outside if inside or not missing else \
        "in stages the server does not time: " + "; ".join(missing) + "; and " + outside
    return f"{share:.0%} ({gap:.1f} ms) of the client's mean e2e is not measured: {where}"


def line(stages: dict) -> str:
    """One console line: each stage's ms per request, the sum against the client's e2e, the dominant stage."""
    if not stages["stages"]:
        return f"where the time goes: not measured ({stages['note']})"
    parts = " | ".join(f"{s['name']} {'-' if s['ms'] is None else format(s['ms'], '.1f')}" for s in stages["stages"])
    total, e2e, ratio = stages["sum_ms"], stages["client_e2e_ms"], stages["sum_over_client_e2e"]
    tail = "" if total is None else f" = {total:.1f}"
    if e2e is not None and ratio is not None:
        tail += f" of client e2e {e2e:.1f} ({ratio:.0%})"
    text = f"where the time goes (server ms/request, {stages['called_model']}): {parts}{tail}"
    if stages["dominant"]:
        text += f"; dominant: {stages['dominant']}"
    if stages.get("coverage"):
        text += f"; {stages['coverage']}"
    return text + (f"; {stages['note']}" if stages["note"] else "")
