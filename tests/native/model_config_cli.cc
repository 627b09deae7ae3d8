// Test driver for ModelConfig (generator/tritongen/native/backend_util.h): the first stdin line is a model config as
// Triton serialises it (JSON); each further line "integer<TAB>a.b.c<TAB>fallback", "param_int<TAB>key<TAB>fallback"
// or "param_num<TAB>key<TAB>fallback" prints "ok<TAB>value" or "error<TAB>message".
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "backend_util.h"

// The Triton API the header reaches, stubbed: an error is its message.
struct TRITONSERVER_Error {
  std::string message;
};
extern "C" {
TRITONSERVER_Error* TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code, const char* msg) {
  return new TRITONSERVER_Error{msg};
}
}

int main() {
  std::string line;
  std::getline(std::cin, line);
  tritongen::ModelConfig config;
  if (TRITONSERVER_Error* err = config.Parse(line, "tensorrt_llm")) {
    std::cout << "error\t" << err->message << "\n";
    return 0;
  }
  while (std::getline(std::cin, line)) {
    std::vector<std::string> f;
    std::stringstream in(line);
    for (std::string part; std::getline(in, part, '\t');) f.push_back(part);
    TRITONSERVER_Error* err = nullptr;
    std::string value;
    if (f[0] == "integer") {
      std::vector<std::string> path;
      std::stringstream dotted(f[1]);
      for (std::string key; std::getline(dotted, key, '.');) path.push_back(key);
      int64_t v = 0;
      // At most three keys: the paths the backends read.
      path.resize(3);
      err = path[1].empty() ? config.Integer({path[0].c_str()}, std::stoll(f[2]), &v)
            : path[2].empty() ? config.Integer({path[0].c_str(), path[1].c_str()}, std::stoll(f[2]), &v)
                              : config.Integer({path[0].c_str(), path[1].c_str(), path[2].c_str()}, std::stoll(f[2]), &v);
      value = std::to_string(v);
    } else if (f[0] == "param_int") {
      int64_t v = 0;
      err = config.IntegerParameter(f[1], f[2], &v);
      value = std::to_string(v);
    } else {
      double v = 0;
      err = config.NumberParameter(f[1], f[2], &v);
      std::ostringstream text;
      text << v;
      value = text.str();
    }
    if (err != nullptr) {
      std::cout << "error\t" << err->message << "\n";
      delete err;
    } else {
      std::cout << "ok\t" << value << "\n";
    }
  }
  return 0;
}
