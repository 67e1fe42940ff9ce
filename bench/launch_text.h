// fallback_text(record): why a benchmark row ran a direct twin, for its printed instance:
// " (b: a stride is not a multiple of 16 bytes)", or "" when the staged instance ran.
#ifndef PALLAS_BENCH_LAUNCH_TEXT_H
#define PALLAS_BENCH_LAUNCH_TEXT_H

#include <pallas/launch.h>

#include <string>

inline std::string fallback_text(const pallas::LaunchRecord& record) {
  if (record.fallback == nullptr) return "";
  std::string operand = record.fallback_operand ? std::string(record.fallback_operand) + ": " : "";
  return " (" + operand + record.fallback + ")";
}

#endif  // PALLAS_BENCH_LAUNCH_TEXT_H
