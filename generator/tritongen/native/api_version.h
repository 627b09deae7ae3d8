// The backend API version check every tritongen backend runs in TRITONBACKEND_Initialize (as Triton's example
// backends do): a server older than the API these sources were written for refuses the backend with one error (Triton logs it as the
// model's load failure) naming both versions, rather than failing at the first call into a function it lacks.
#pragma once

#include <string>

#include "backend_util.h"

#ifndef TRITONGEN_REQUIRED_API_MINOR
#define TRITONGEN_REQUIRED_API_MINOR TRITONBACKEND_API_VERSION_MINOR
#endif

namespace tritongen {

inline TRITONSERVER_Error* CheckApiVersion(TRITONBACKEND_Backend* backend) {
  const char* name = "tritongen";
  TG_RETURN_IF_ERROR(TRITONBACKEND_BackendName(backend, &name));
  uint32_t major = 0, minor = 0;
  TG_RETURN_IF_ERROR(TRITONBACKEND_ApiVersion(&major, &minor));
  const uint32_t need_major = TRITONBACKEND_API_VERSION_MAJOR, need_minor = TRITONGEN_REQUIRED_API_MINOR;
  const std::string need = std::to_string(need_major) + "." + std::to_string(need_minor);
  const std::string have = std::to_string(major) + "." + std::to_string(minor);
  if (major != need_major || minor < need_minor) {
    const std::string msg = std::string(name) + " backend: needs Triton backend API " + need +
                            " or a newer 1.x; this tritonserver offers " + have +
                            "; use tritonserver 2.51 (NGC 24.10) or newer, or rebuild the backend for this server";
    return Err(TRITONSERVER_ERROR_UNSUPPORTED, msg);
  }
  Log(TRITONSERVER_LOG_INFO, std::string(name) + " backend: Triton backend API " + have + " (needs " + need + ")");
  return nullptr;
}

}  // namespace tritongen
