// The detokenisation table, asked of `preprocessing` (which owns the tokenizer) before the first request reaches
// the LLM; it never changes afterwards.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "backend_util.h"
#include "detok.h"

namespace tritongen {
namespace bls {

class TableLoader {
 public:
  TableLoader(TRITONSERVER_Server* server, TRITONSERVER_ResponseAllocator* allocator, bool skip_special_tokens)
      : state_(std::make_shared<State>()), server_(server), allocator_(allocator), skip_special_(skip_special_tokens) {}

  // The table, or null while it is not loaded.
  std::shared_ptr<const DetokTable> table() const;

  // Loads the table if it is not loaded yet, waiting up to `timeout`. No lock is held while waiting (a condition
  // variable); one request to preprocessing is in flight at a time, and one that answers after a timeout still
  // sets the table for the next caller.
  TRITONSERVER_Error* Ensure(std::chrono::seconds timeout);

 private:
  // Shared with the in-flight request's responder, which may outlive this loader.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::shared_ptr<const DetokTable> table;
    bool loading = false;
    std::string error;  // of the last attempt
  };
  class Responder;

  std::shared_ptr<State> state_;
  TRITONSERVER_Server* server_;
  TRITONSERVER_ResponseAllocator* allocator_;
  bool skip_special_;
};

}  // namespace bls
}  // namespace tritongen
