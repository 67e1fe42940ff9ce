//===- ProgramSkeleton.h - what the GPU and host lowerings share -*- C++ -*-===//
//
// Both lowerings walk a kernel body op by op. They differ in how a block
// value is held (per-thread fragments on the GPU, a stack buffer on the host)
// and agree on the rest, which lives here:
//  - pallas.program_id and pallas.num_programs become the lowering's grid
//    coordinates (block ids and grid dims on the GPU; the grid loops'
//    induction variables and bounds on the host);
//  - an op without block values and without regions (index arithmetic,
//    scalar math, constants) is the same in every thread and is cloned;
//  - anything else without a rule is an error that names the op, the
//    lowering and the rules it has.
// pallas.block resolves to its array the same way in both (BlockIndexing.h).
//
//===----------------------------------------------------------------------===//
#ifndef PALLAS_TRANSFORMS_PROGRAMSKELETON_H
#define PALLAS_TRANSFORMS_PROGRAMSKELETON_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

#include <functional>

namespace mlir::pallas {

/// The program's place in the grid, as a lowering knows it: program_id(axis)
/// and num_programs(axis) as index values.
struct GridCoordinates {
  std::function<Value(OpBuilder&, Location, int32_t axis)> programId;
  std::function<Value(OpBuilder&, Location, int32_t axis)> numPrograms;
};

/// Maps the result of `op` when it is pallas.program_id or pallas.num_programs
/// and returns true; false for any other op (nothing emitted).
bool lowerGridOp(Operation* op, IRMapping& map, OpBuilder& b, const GridCoordinates& grid);

/// The fallback for an op no rule of `lowering` ("GPU", "host") lowered: a
/// clone when it has no block values and no regions, else an error naming
/// it and `knownRules`.
LogicalResult cloneScalarOp(Operation* op, IRMapping& map, OpBuilder& b, StringRef lowering,
                            StringRef knownRules);

}  // namespace mlir::pallas

#endif  // PALLAS_TRANSFORMS_PROGRAMSKELETON_H
