// The synthetic runtime's engine model for the native token source: one step generates a token for every running
// request and takes step_base_ms + per_sequence_ms * running + per_prefill_token_ms * prefill_tokens; requests are
// admitted first come, first served while fewer than max_batch run and their KV reservation (prompt + output
// tokens) fits kv_tokens (0: unlimited); a request that alone exceeds it is admitted when nothing else runs.
// The one definition of this schedule is generator/tritongen/served/engine_model.py; EngineCore mirrors its
// EngineCore line by line, and tests/tune/test_engine_model.py runs both on the same requests.

#pragma once

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace tritongen {

struct EngineParams {
  double step_base_ms = 0;
  double per_sequence_ms = 0;
  double per_prefill_token_ms = 0;
  int64_t max_batch = 1;
  int64_t kv_tokens = 0;  // 0: unlimited
};

inline double StepMs(const EngineParams& p, int64_t running, int64_t prefill_tokens) {
  return p.step_base_ms + p.per_sequence_ms * static_cast<double>(running) +
         p.per_prefill_token_ms * static_cast<double>(prefill_tokens);
}

// Queue and running batch, without threads or clock.
template <class Item>
class EngineCore {
 public:
  explicit EngineCore(const EngineParams& p) : p_(p) {}

  void Enqueue(Item* item, int64_t prompt_len, int64_t n_out) {
    waiting_.push_back(Waiting{item, prompt_len, prompt_len + n_out});
  }

  // Admits what fits; returns the prefill tokens of the admitted requests.
  int64_t Admit() {
    int64_t prefill = 0;
    while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < p_.max_batch) {
      const Waiting& w = waiting_.front();
      if (p_.kv_tokens > 0 && !running_.empty() && kv_used_ + w.kv > p_.kv_tokens) break;
      running_.push_back(w.item);
      kv_[w.item] = w.kv;
      kv_used_ += w.kv;
      prefill += w.prompt_len;
      waiting_.pop_front();
    }
    return prefill;
  }

  void Finish(const std::vector<Item*>& ended) {
    if (ended.empty()) return;
    std::unordered_set<Item*> gone(ended.begin(), ended.end());
    std::vector<Item*> kept;
    for (Item* item : running_) {
      if (gone.count(item) == 0) kept.push_back(item);
    }
    running_.swap(kept);
    for (Item* item : gone) {
      kv_used_ -= kv_[item];
      kv_.erase(item);
    }
  }

  const std::vector<Item*>& running() const { return running_; }
  template <class F>
  void Visit(F f) const {
    for (Item* item : running_) f(item);
    for (const Waiting& w : waiting_) f(w.item);
  }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  std::vector<Item*> TakeAll() {  // everything still queued or running (shutdown)
    std::vector<Item*> all(running_);
    for (const Waiting& w : waiting_) all.push_back(w.item);
    running_.clear();
    waiting_.clear();
    kv_.clear();
    kv_used_ = 0;
    return all;
  }

 private:
  struct Waiting {
    Item* item;
    int64_t prompt_len;
    int64_t kv;
  };
  EngineParams p_;
  std::deque<Waiting> waiting_;
  std::vector<Item*> running_;
  std::unordered_map<Item*, int64_t> kv_;
  int64_t kv_used_ = 0;
};

// EngineCore on a thread and the steady clock. Owns the requests from Add() on (EngineCore orders them without
// owning); `token(item)` emits one token of a running request and returns true when the request has ended (last
// token, cancelled, stopped); `ended(item)` and, at shutdown for what is still in flight, `abandon(item)` receive
// the request back, and it is destroyed when they return.
template <class Item>
class EngineLoop {
 public:
  using Owned = std::unique_ptr<Item>;

  EngineLoop(const EngineParams& p, std::function<bool(Item*)> token, std::function<void(Owned)> ended,
             std::function<void(Owned)> abandon)
      : p_(p), core_(p), token_(std::move(token)), ended_(std::move(ended)), abandon_(std::move(abandon)),
        thread_([this] { Loop(); }) {}
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  ~EngineLoop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = false;
      cv_.notify_one();
    }
    thread_.join();
    for (Item* item : core_.TakeAll()) abandon_(Take(item));
  }

  void Add(Owned item, int64_t prompt_len, int64_t n_out) {
    std::lock_guard<std::mutex> lock(mu_);
    Item* raw = item.get();
    owned_.emplace(raw, std::move(item));
    core_.Enqueue(raw, prompt_len, n_out);
    cv_.notify_one();
  }

  // Calls f(item) for every queued and running request, under the engine's lock.
  template <class F>
  void Visit(F f) {
    std::lock_guard<std::mutex> lock(mu_);
    core_.Visit(f);
  }

 private:
  Owned Take(Item* item) {  // with mu_ held, or once the thread is joined
    auto node = owned_.extract(item);
    return std::move(node.mapped());
  }

  void Loop() {
    pthread_setname_np(pthread_self(), "tg-engine");
    using Clock = std::chrono::steady_clock;
    std::unique_lock<std::mutex> lock(mu_);
    Clock::time_point step_start = Clock::now();
    while (running_) {
      const int64_t prefill = core_.Admit();
      if (core_.running().empty()) {
        cv_.wait(lock, [this] { return !running_ || !core_.idle(); });
        step_start = Clock::now();  // an idle engine starts its next step when work arrives
        continue;
      }
      const auto step = std::chrono::duration<double, std::milli>(StepMs(p_, core_.running().size(), prefill));
      const Clock::time_point step_end = step_start + std::chrono::duration_cast<Clock::duration>(step);
      // Arrivals during the step wait for the next one (Add only enqueues); shutdown ends the wait early.
      if (cv_.wait_until(lock, step_end, [this] { return !running_; })) break;
      std::vector<Item*> batch(core_.running());
      lock.unlock();
      std::vector<Item*> ended;
      for (Item* item : batch) {
        if (token_(item)) ended.push_back(item);
      }
      lock.lock();
      core_.Finish(ended);
      std::vector<Owned> gone;
      for (Item* item : ended) gone.push_back(Take(item));
      lock.unlock();
      for (Owned& item : gone) ended_(std::move(item));
      lock.lock();
      // Steps follow the model's clock: a host that fell behind emits the late steps back to back (lateness shows
      // as TTFT/ITL on the client, as with the fixed-timing source), it does not slow the model down.
      step_start = step_end;
    }
  }

  EngineParams p_;
  EngineCore<Item> core_;
  std::unordered_map<Item*, Owned> owned_;  // every request in core_, guarded by mu_
  std::function<bool(Item*)> token_;
  std::function<void(Owned)> ended_;
  std::function<void(Owned)> abandon_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool running_ = true;
  std::thread thread_;  // last: it starts running in the constructor
};

}  // namespace tritongen
