#include "tokensource/timer.h"

#include <chrono>

#include "error_kinds.h"
#include "tokensource/model.h"

namespace tritongen {
namespace tokensource {

void TimerShard::Add(std::unique_ptr<Generation> g, uint64_t due_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool earliest = heap_.empty() || due_ns < heap_.top().due;
  Generation* raw = g.get();
  live_.emplace(raw, std::move(g));
  heap_.push(Entry{due_ns, seq_++, raw});
  if (earliest) cv_.notify_one();
}

void TimerShard::Stop(const std::string& triton_id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [raw, owned] : live_) {
    if (raw->triton_id == triton_id) raw->stopped = true;
  }
}

bool TimerShard::Step(Generation* g) {
  bool cancelled = false;
  LogIfError(TRITONBACKEND_ResponseFactoryIsCancelled(g->factory, &cancelled), "cancellation check");
  if (cancelled) {
    SendFinalError(g->factory, TRITONSERVER_ERROR_CANCELLED, "request cancelled");
    return true;
  }
  if (g->stopped) {
    LogIfError(TRITONBACKEND_ResponseFactorySendFlags(g->factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL),
               "stop response");
    return true;
  }
  if (model_->DrainOver()) {
    SendFinalError(g->factory, TRITONSERVER_ERROR_UNAVAILABLE,
                   Tag(kUnavailable) + model_->name() + ": the server is stopping; retry the request on another replica");
    return true;
  }
  ++g->produced;
  const bool last = g->produced >= g->n_out;
  const uint32_t flags = last ? TRITONSERVER_RESPONSE_COMPLETE_FINAL : 0;
  bool ok = true;
  if (g->streaming && (last || g->produced - g->sent >= model_->interval())) {
    ok = model_->SendTokens(g, g->sent, g->produced, flags);
    g->sent = g->produced;
  } else if (last && !g->streaming) {
    ok = model_->SendTokens(g, 0, g->produced, flags);
  }
  if (!ok) {
    // A request whose client is gone must not stop the others: end it with an error and move on.
    SendFinalError(g->factory, TRITONSERVER_ERROR_INTERNAL, Tag(kInternal) + "token source: sending a response failed");
    return true;
  }
  return last;
}

void TimerShard::Loop() {
  NameThread("tg-source");
  std::vector<Entry> due;
  std::vector<Generation*> finished;
  std::vector<std::unique_ptr<Generation>> ended;
  std::unique_lock<std::mutex> lock(mu_);
  while (running_) {
    if (heap_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const uint64_t now = NowNs();
    if (heap_.top().due > now) {
      cv_.wait_until(lock, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(heap_.top().due)));
      continue;
    }
    while (!heap_.empty() && heap_.top().due <= now) {
      due.push_back(heap_.top());
      heap_.pop();
    }
    // Tokens are sent without the lock, so that Add and Stop from Triton's threads never wait for a send.
    lock.unlock();
    for (Entry& e : due) {
      if (Step(e.generation)) {
        finished.push_back(e.generation);
        e.generation = nullptr;
      } else {
        e.due += model_->itl_ns();
      }
    }
    lock.lock();
    for (const Entry& e : due) {
      if (e.generation != nullptr) heap_.push(Entry{e.due, seq_++, e.generation});
    }
    for (Generation* g : finished) ended.push_back(std::move(live_.extract(g).mapped()));
    due.clear();
    finished.clear();
    lock.unlock();
    for (auto& g : ended) {
      g.reset();  // deletes its response factory, outside the lock
      model_->Ended();
    }
    ended.clear();
    lock.lock();
  }
}

TimerShard::~TimerShard() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
    cv_.notify_one();
  }
  thread_.join();
  // Every request ends with exactly one FINAL, also when the model unloads with requests in flight.
  for (auto& [raw, owned] : live_) {
    SendFinalError(raw->factory, TRITONSERVER_ERROR_UNAVAILABLE,
                   Tag(kUnavailable) + "token source: the model is unloading");
    model_->Ended();
  }
  live_.clear();
}

}  // namespace tokensource
}  // namespace tritongen
