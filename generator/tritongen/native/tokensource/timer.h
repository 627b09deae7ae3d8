// A timer thread of the token source: its own heap of due requests, so that arrivals, emission and stop requests
// spread over a few threads do not contend on one lock.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tokensource/generation.h"

namespace tritongen {
namespace tokensource {

class ModelState;

// Owns the requests it was given until their FINAL response; the heap orders them by due time without owning.
// Its thread starts in the constructor and is joined in the destructor, which ends what is still in flight with
// UNAVAILABLE (every request ends with exactly one FINAL, also when the model unloads).
class TimerShard {
 public:
  explicit TimerShard(ModelState* model) : model_(model), thread_([this] { Loop(); }) {}
  ~TimerShard();
  TimerShard(const TimerShard&) = delete;
  TimerShard& operator=(const TimerShard&) = delete;

  void Add(std::unique_ptr<Generation> g, uint64_t due_ns);
  // Marks this shard's requests with `triton_id` stopped; each ends with a flags-only FINAL when next due.
  void Stop(const std::string& triton_id);
  // One token of `g`; true when the request has ended (the engine loop calls it too, on its own thread).
  bool Step(Generation* g);

 private:
  struct Entry {
    uint64_t due;
    uint64_t seq;  // FIFO among equal due times
    Generation* generation;
    bool operator>(const Entry& other) const { return due != other.due ? due > other.due : seq > other.seq; }
  };

  void Loop();

  ModelState* model_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap_;
  std::unordered_map<Generation*, std::unique_ptr<Generation>> live_;  // the owner of every request in the heap
  uint64_t seq_ = 0;
  bool running_ = true;
  std::thread thread_;  // last: it starts running in the constructor
};

}  // namespace tokensource
}  // namespace tritongen
