//===- ErrorRecord.h - Writing a failed pallas.check ------------*- C++ -*-===//
//
// The kernel's error record is 8 int32 in memory the runtime provides:
//
//   [0]     how many programs failed a check (the lowering increments it)
//   [1]     check + 1 of the first failure (0: none)
//   [2..7]  its values, each as (low, high) i32 halves of an i64
//
// Worked example: `labels[5] = -3 outside [0, 1000)` recorded by check 0 with
// values (5, -3, 1000) leaves {1, 1, 5, 0, -3, -1, 1000, 0}.
//
//===----------------------------------------------------------------------===//

#ifndef PALLAS_TRANSFORMS_ERRORRECORD_H
#define PALLAS_TRANSFORMS_ERRORRECORD_H

#include "mlir/IR/Builders.h"

namespace mlir::pallas {

/// Where `oldCount` (the failure count before this program's increment) is 0,
/// stores check + 1 and `halves` into the record `errors` (a 1-D i32 memref).
void writeFirstFailure(OpBuilder& b, Location loc, Value errors, Value oldCount, int32_t check,
                       ValueRange halves);

}  // namespace mlir::pallas

#endif  // PALLAS_TRANSFORMS_ERRORRECORD_H
