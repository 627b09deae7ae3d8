// Test driver for generator/tritongen/native/bls/lora_resend.h: answers stdin lines, one output line each:
//   "miss<TAB>message"                        -> "task<TAB>id" or "none" (CacheMissTaskId)
//   "npy<TAB>path"                            -> "ok<TAB>descr<TAB>d0,d1,..." or "error<TAB>problem" (ReadNpy)
//   "adapter<TAB>lora_dir<TAB>task<TAB>batch" -> "ok<TAB>weights shape<TAB>weights hex<TAB>config shape<TAB>config hex"
//                                                or "error<TAB>code<TAB>message" (AdapterTensors)
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bls/lora_resend.h"

// The Triton API the header reaches, stubbed: an error is its code and message.
struct TRITONSERVER_Error {
  TRITONSERVER_Error_Code code;
  std::string message;
};
extern "C" {
TRITONSERVER_Error* TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char* msg) {
  return new TRITONSERVER_Error{code, msg};
}
}

namespace {

std::string Shape(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : ",") + std::to_string(d);
  return s;
}

std::string Hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (unsigned char c : bytes) {
    s += digits[c >> 4];
    s += digits[c & 15];
  }
  return s;
}

}  // namespace

int main() {
  using namespace tritongen::bls;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> f;
    std::stringstream in(line);
    for (std::string part; std::getline(in, part, '\t');) f.push_back(part);
    if (f[0] == "miss") {
      uint64_t task = 0;
      std::cout << (CacheMissTaskId(f.size() > 1 ? f[1] : "", &task) ? "task\t" + std::to_string(task) : "none")
                << "\n";
    } else if (f[0] == "npy") {
      NpyArray a;
      const std::string problem = ReadNpy(f[1], &a);
      if (problem.empty())
        std::cout << "ok\t" << a.descr << "\t" << Shape(a.shape) << "\n";
      else
        std::cout << "error\t" << problem << "\n";
    } else {
      tritongen::Tensor weights, config;
      TRITONSERVER_Error* err = AdapterTensors(f[1], std::stoull(f[2]), std::stoul(f[3]), &weights, &config);
      if (err != nullptr) {
        std::cout << "error\t" << (err->code == TRITONSERVER_ERROR_INVALID_ARG ? "INVALID_ARG" : "INTERNAL") << "\t"
                  << err->message << "\n";
        delete err;
      } else {
        std::cout << "ok\t" << weights.name << ":" << weights.dtype << ":" << Shape(weights.shape) << "\t"
                  << Hex(weights.data) << "\t" << config.name << ":" << config.dtype << ":" << Shape(config.shape)
                  << "\t" << Hex(config.data) << "\n";
      }
    }
  }
  return 0;
}
