//===- ProgramSkeleton.cpp - what the GPU and host lowerings share --------===//

#include "ProgramSkeleton.h"

#include "pallas/Dialect/PallasDialect.h"

namespace mlir::pallas {

bool lowerGridOp(Operation* op, IRMapping& map, OpBuilder& b, const GridCoordinates& grid) {
  if (auto pid = dyn_cast<ProgramIdOp>(op)) {
    map.map(pid.getResult(), grid.programId(b, pid.getLoc(), pid.getAxis()));
    return true;
  }
  if (auto np = dyn_cast<NumProgramsOp>(op)) {
    map.map(np.getResult(), grid.numPrograms(b, np.getLoc(), np.getAxis()));
    return true;
  }
  return false;
}

LogicalResult cloneScalarOp(Operation* op, IRMapping& map, OpBuilder& b, StringRef lowering,
                            StringRef knownRules) {
  bool blockValued = llvm::any_of(op->getResultTypes(), llvm::IsaPred<VectorType>) ||
                     llvm::any_of(op->getOperandTypes(), llvm::IsaPred<VectorType>);
  if (blockValued || op->getNumRegions() != 0)
    return op->emitOpError("no ") << lowering << " lowering rule for " << op->getName()
                                  << "; known rules: " << knownRules;
  b.clone(*op, map);
  return success();
}

}  // namespace mlir::pallas
