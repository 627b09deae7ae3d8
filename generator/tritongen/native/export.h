// The one export macro of tritongen's native backends: the TRITONBACKEND_* entry points are the only symbols a
// backend library exports (the build hides everything else, CMAKE_CXX_VISIBILITY_PRESET hidden, and
// libtritongen.ldscript lists what stays global).
#pragma once

#define TG_EXPORT extern "C" __attribute__((visibility("default")))
