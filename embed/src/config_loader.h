// config_loader.h — reads a dlam configuration file (docs/language.md, "Limits and
// configuration").
//
// The file is a Lua 5.4 chunk run in a sandboxed interpreter (base, string, math and
// table libraries only; no dofile/loadfile/require, text chunks only) with an
// instruction budget and a memory cap, so a broken or hostile config ends with an
// error instead of a hang. The globals it sets are checked against the known keys:
//
//   heap_limit_mb      integer > 0
//   stack_limit        integer > 0
//   instruction_limit  integer >= 0 (0: no limit)
//   include_path       array of strings
//   ffi                { enabled = boolean, libraries = array of strings | nil }
//   file_io            boolean
//
// Keys the file does not set keep the values already in `cfg`.
#pragma once
#include <string>

#include "dlam/config.h"

namespace dlam {

// Runs the Lua file at `path` and stores the settings it makes into `cfg`.
// Throws dlam::Error of kind Config whose message names the offending key (for
// example "unknown configuration key 'heap_limt_mb'") with `path` as the file and
// the line of the assignment (or the line Lua reports for a syntax or runtime
// error). `cfg` is modified only when the whole file is valid.
void loadConfigFile(const std::string& path, Config& cfg);

}  // namespace dlam
