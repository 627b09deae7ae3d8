// Test driver for generator/tritongen/native/detok.h: reads a detokenizer table file, then lines of
// "<chunk sizes...> | <ids...>" on stdin; for each line prints the streamed pieces' concatenation and the whole
// decode, hex-encoded, so the Python test compares both with the tokenizer's own decode.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "detok.h"

static std::string Hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::ifstream f(argv[1], std::ios::binary);
  std::string blob((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  tritongen::DetokTable table;
  std::string error;
  if (!table.Parse(blob, &error)) {
    std::cerr << error << "\n";
    return 1;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::vector<size_t> chunks;
    std::vector<int32_t> ids;
    std::string word;
    bool after = false;
    while (in >> word) {
      if (word == "|") after = true;
      else if (after) ids.push_back(std::stoi(word));
      else chunks.push_back(std::stoul(word));
    }
    tritongen::Detokenizer d(&table);
    std::string streamed, whole;
    size_t at = 0, k = 0;
    bool ok = true;
    while (at < ids.size()) {
      size_t n = std::min(chunks.empty() ? 1 : chunks[k++ % chunks.size()], ids.size() - at);
      std::string piece;
      ok = ok && d.Add(ids.data() + at, n, &piece);
      streamed += piece;
      at += n;
    }
    d.Finish(&streamed);
    ok = ok && tritongen::DecodeWhole(table, ids.data(), ids.size(), &whole);
    std::cout << (ok ? "ok " : "bad ") << Hex(streamed) << " " << Hex(whole) << "\n";
  }
  return 0;
}
