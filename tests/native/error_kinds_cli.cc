// Test driver for generator/tritongen/native/error_kinds.h: prints the kinds the header spells, then answers
// stdin lines "wrap<TAB>prefix<TAB>message" (Wrap) and "bad<TAB>input<TAB>problem" (BadRequest's message), one
// output line each, so the Python test compares them with tritongen.served.error_kinds.
#include <iostream>
#include <string>

#include "error_kinds.h"

// The Triton API the header reaches through backend_util.h, stubbed: an error is its message.
struct TRITONSERVER_Error {
  std::string message;
};
extern "C" {
TRITONSERVER_Error* TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code, const char* msg) {
  return new TRITONSERVER_Error{msg};
}
}

int main() {
  using namespace tritongen;
  for (const char* kind : {kBadRequest, kContextLengthExceeded, kOverloaded, kUnavailable, kInternal})
    std::cout << "kind\t" << kind << "\n";
  std::string line;
  while (std::getline(std::cin, line)) {
    size_t a = line.find('\t'), b = line.find('\t', a + 1);
    std::string op = line.substr(0, a), first = line.substr(a + 1, b - a - 1), second = line.substr(b + 1);
    if (op == "wrap") {
      std::cout << Wrap(first, second) << "\n";
    } else {
      TRITONSERVER_Error* err = BadRequest(first, second);
      std::cout << err->message << "\n";
      delete err;
    }
  }
  return 0;
}
