// The C ABI the page calls (docs/explorer/app.js, through Emscripten's ccall): each function
// takes and returns UTF-8 JSON text (explorer_api.h says what), the result in memory the
// caller frees with pw_free. Built only by //tools/explorer:explorer_wasm (emcc).
#include <cstdlib>
#include <cstring>
#include <string>

#include <emscripten/emscripten.h>

#include "tools/explorer/explorer_api.h"

namespace {

char* copy_out(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

}  // namespace

extern "C" {

EMSCRIPTEN_KEEPALIVE char* pw_schedules() { return copy_out(pipewright::explorer::schedules_json()); }

EMSCRIPTEN_KEEPALIVE char* pw_explore(const char* request) {
  return copy_out(pipewright::explorer::explore_json(request == nullptr ? "" : request));
}

EMSCRIPTEN_KEEPALIVE char* pw_trace(const char* trace_text) {
  return copy_out(pipewright::explorer::trace_json(trace_text == nullptr ? "" : trace_text));
}

EMSCRIPTEN_KEEPALIVE void pw_free(char* p) { std::free(p); }

}  // extern "C"
