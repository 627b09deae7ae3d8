// Incremental detokenisation over a table of per-token bytes (generator/tritongen/served/detok_table.py builds the table
// and holds the same algorithm in Python, which the tests compare with the tokenizer's own decode).
//
// Streamed text must concatenate to the whole text byte for byte, so each mode holds back what a later token
// could still change: byte-level BPE holds an incomplete UTF-8 sequence at the end; SentencePiece holds a run of
// byte-fallback tokens until a piece ends it (an invalid run becomes one U+FFFD per byte, the whole run).
#pragma once

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace tritongen {

constexpr uint8_t kByteLevel = 0, kSentencePiece = 1;
constexpr uint8_t kText = 0, kByte = 1, kSkip = 2;
static const char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

struct DetokTable {
  uint8_t mode = kByteLevel;
  uint8_t strip = 0;
  std::vector<uint8_t> kinds;
  std::vector<std::string> bytes;

  // Parses the blob written by detok_table.build_table; false with `error` set when it is malformed.
  bool Parse(const std::string& blob, std::string* error) {
    if (blob.size() < 14 || blob.compare(0, 4, "TGDT") != 0) {
      *error = "not a tritongen detokenizer table";
      return false;
    }
    uint32_t version = 0, size = 0;
    std::memcpy(&version, blob.data() + 4, 4);
    mode = static_cast<uint8_t>(blob[8]);
    strip = static_cast<uint8_t>(blob[9]);
    std::memcpy(&size, blob.data() + 10, 4);
    if (version != 1 || mode > kSentencePiece) {
      *error = "unsupported detokenizer table version or mode";
      return false;
    }
    size_t at = 14;
    kinds.resize(size);
    bytes.resize(size);
    for (uint32_t i = 0; i < size; ++i) {
      uint32_t n = 0;
      if (at + 5 > blob.size()) break;
      kinds[i] = static_cast<uint8_t>(blob[at]);
      std::memcpy(&n, blob.data() + at + 1, 4);
      at += 5;
      if (at + n > blob.size()) {
        *error = "truncated detokenizer table";
        return false;
      }
      bytes[i].assign(blob.data() + at, n);
      at += n;
    }
    return true;
  }
};

// Length of the UTF-8 sequence a lead byte starts (0: not a lead byte), and the valid range of its second byte.
inline int Utf8Lead(uint8_t b, uint8_t* lo, uint8_t* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) {
    if (b == 0xE0) *lo = 0xA0;
    if (b == 0xED) *hi = 0x9F;
    return 3;
  }
  if (b >= 0xF0 && b <= 0xF4) {
    if (b == 0xF0) *lo = 0x90;
    if (b == 0xF4) *hi = 0x8F;
    return 4;
  }
  return 0;
}

// Decodes `in` as UTF-8, replacing each maximal invalid subpart with U+FFFD (what Rust's from_utf8_lossy and
// Python's errors="replace" do). Unless `final`, a trailing sequence that a later byte could complete is left
// unconsumed; returns the number of bytes consumed.
inline size_t Utf8Lossy(const std::string& in, bool final, std::string* out) {
  size_t i = 0, n = in.size();
  while (i < n) {
    uint8_t lo, hi;
    int len = Utf8Lead(static_cast<uint8_t>(in[i]), &lo, &hi);
    if (len == 0) {
      out->append(kReplacement);
      ++i;
      continue;
    }
    if (len == 1) {
      out->push_back(in[i++]);
      continue;
    }
    int have = 1;  // bytes of this sequence that are valid so far
    while (have < len && i + have < n) {
      uint8_t c = static_cast<uint8_t>(in[i + have]);
      uint8_t l = have == 1 ? lo : 0x80, h = have == 1 ? hi : 0xBF;
      if (c < l || c > h) break;
      ++have;
    }
    if (have == len) {
      out->append(in, i, len);
      i += len;
    } else if (i + have == n && !final) {
      break;  // a valid prefix at the end: a later byte may complete it
    } else {
      out->append(kReplacement);
      i += have;
    }
  }
  return i;
}

// Strict UTF-8 validity of a whole byte string (SentencePiece byte runs are all-or-nothing).
inline bool Utf8Valid(const std::string& in) {
  std::string ignored;
  ignored.reserve(in.size());
  size_t i = 0;
  while (i < in.size()) {
    uint8_t lo, hi;
    int len = Utf8Lead(static_cast<uint8_t>(in[i]), &lo, &hi);
    if (len == 0 || i + len > in.size()) return false;
    for (int k = 1; k < len; ++k) {
      uint8_t c = static_cast<uint8_t>(in[i + k]);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return false;
    }
    i += len;
  }
  return true;
}

// The decoding state of one output sequence.
class Detokenizer {
 public:
  explicit Detokenizer(const DetokTable* table) : table_(table) {}

  // Text that the new tokens make final. Ids outside the table are an error the caller reports.
  bool Add(const int32_t* ids, size_t count, std::string* out) {
    for (size_t k = 0; k < count; ++k) {
      int32_t id = ids[k];
      if (id < 0 || static_cast<size_t>(id) >= table_->kinds.size()) return false;
      uint8_t kind = table_->kinds[id];
      const std::string& b = table_->bytes[id];
      if (kind == kSkip) continue;
      if (table_->mode == kByteLevel) {
        pending_ += b;
      } else if (kind == kByte) {
        run_ += b;
      } else {
        FlushRun(out);
        Emit(b, out);
      }
    }
    if (table_->mode == kByteLevel) Drain(false, out);
    return true;
  }

  // Releases what was held back: the end of the sequence.
  void Finish(std::string* out) {
    if (table_->mode == kByteLevel) {
      Drain(true, out);
    } else {
      FlushRun(out);
    }
  }

 private:
  void Drain(bool final, std::string* out) {
    std::string text;
    size_t used = Utf8Lossy(pending_, final, &text);
    pending_.erase(0, used);
    Emit(text, out);
  }

  void FlushRun(std::string* out) {
    if (run_.empty()) return;
    if (Utf8Valid(run_)) {
      Emit(run_, out);
    } else {
      std::string text;
      for (size_t i = 0; i < run_.size(); ++i) text += kReplacement;
      Emit(text, out);
    }
    run_.clear();
  }

  // Appends decoded text, dropping the leading space of the whole text where the decoder strips it.
  void Emit(const std::string& text, std::string* out) {
    if (text.empty()) return;
    if (!started_) {
      started_ = true;
      if (table_->strip && text[0] == ' ') {
        out->append(text, 1, std::string::npos);
        return;
      }
    }
    out->append(text);
  }

  const DetokTable* table_;
  std::string pending_;  // byte-level: bytes not yet decoded (an incomplete UTF-8 sequence)
  std::string run_;      // SentencePiece: the open run of byte-fallback tokens
  bool started_ = false;
};

inline bool DecodeWhole(const DetokTable& table, const int32_t* ids, size_t count, std::string* out) {
  Detokenizer d(&table);
  if (!d.Add(ids, count, out)) return false;
  d.Finish(out);
  return true;
}

// Text-level stop sequences over one sequence's streamed text (byte-wise; stop strings are valid UTF-8, so a
// byte match is a character match). The text ends right after the first stop string found.
class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops) {
    for (auto& s : stops)
      if (!s.empty()) stops_.push_back(std::move(s));
    for (auto& s : stops_) longest_ = std::max(longest_, s.size());
  }
  bool empty() const { return stops_.empty(); }

  // Cuts `chunk` after a stop string that ends in it; true when one did.
  bool Feed(std::string* chunk) {
    if (stops_.empty() || chunk->empty()) return false;
    std::string window = tail_ + *chunk;
    size_t best = std::string::npos;
    for (auto& s : stops_) {
      size_t at = window.find(s);
      if (at != std::string::npos) best = std::min(best, at + s.size());
    }
    if (best != std::string::npos) {
      chunk->resize(best - tail_.size());
      return true;
    }
    if (longest_ <= 1)
      tail_.clear();
    else
      tail_ = window.size() > longest_ - 1 ? window.substr(window.size() - (longest_ - 1)) : window;
    return false;
  }

  // Whole-text form: cut after the first stop string at or after byte `start`.
  bool Cut(std::string* text, size_t start = 0) const {
    size_t best = std::string::npos;
    for (auto& s : stops_) {
      size_t at = text->find(s, start);
      if (at != std::string::npos) best = std::min(best, at + s.size());
    }
    if (best == std::string::npos) return false;
    text->resize(best);
    return true;
  }

 private:
  std::vector<std::string> stops_;
  size_t longest_ = 0;
  std::string tail_;
};

}  // namespace tritongen
