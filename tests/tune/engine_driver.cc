// Replays generator/tritongen/native/engine_model.h's EngineCore on a virtual clock, the way
// tritongen.served.engine_model.simulate does (open loop), for tests/tune/test_engine_model.py.
// argv: step_base_ms per_sequence_ms per_prefill_token_ms max_batch kv_tokens; stdin: n, then n lines
// "arrival_ms prompt_len n_out" in arrival order; stdout: one line of token times (ms) per request.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "engine_model.h"

struct Req {
  double arrival = 0;
  long long prompt = 0, n_out = 0;
  std::vector<double> times;
};

int main(int argc, char** argv) {
  if (argc != 6) return 2;
  tritongen::EngineParams p;
  p.step_base_ms = std::atof(argv[1]);
  p.per_sequence_ms = std::atof(argv[2]);
  p.per_prefill_token_ms = std::atof(argv[3]);
  p.max_batch = std::atoll(argv[4]);
  p.kv_tokens = std::atoll(argv[5]);
  int n = 0;
  if (std::scanf("%d", &n) != 1) return 2;
  std::vector<Req> reqs(static_cast<size_t>(n));
  for (Req& r : reqs) {
    if (std::scanf("%lf %lld %lld", &r.arrival, &r.prompt, &r.n_out) != 3) return 2;
  }
  tritongen::EngineCore<Req> core(p);
  double clock = 0;
  size_t i = 0;
  while (true) {
    while (i < reqs.size() && reqs[i].arrival <= clock) {
      core.Enqueue(&reqs[i], reqs[i].prompt, reqs[i].n_out);
      ++i;
    }
    const int64_t prefill = core.Admit();
    if (core.running().empty()) {
      if (i >= reqs.size()) break;
      clock = reqs[i].arrival;
      continue;
    }
    clock += tritongen::StepMs(p, static_cast<int64_t>(core.running().size()), prefill);
    std::vector<Req*> ended;
    for (Req* r : core.running()) {
      r->times.push_back(clock);
      if (static_cast<long long>(r->times.size()) >= r->n_out) ended.push_back(r);
    }
    core.Finish(ended);
  }
  for (const Req& r : reqs) {
    for (size_t t = 0; t < r.times.size(); ++t) std::printf(t ? " %.6f" : "%.6f", r.times[t]);
    std::printf("\n");
  }
  return 0;
}
