//===- PallasDialect.h - the pallas kernel dialect ----------------*- C++ -*-===//
#ifndef PALLAS_DIALECT_PALLASDIALECT_H
#define PALLAS_DIALECT_PALLASDIALECT_H

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "pallas/Dialect/PallasDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "pallas/Dialect/PallasAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "pallas/Dialect/PallasTypes.h.inc"

#define GET_OP_CLASSES
#include "pallas/Dialect/PallasOps.h.inc"

namespace mlir::pallas {
/// Name of the unit attribute that marks a func.func as a pallas kernel.
inline constexpr llvm::StringLiteral kKernelAttrName = "pallas.kernel";
/// Name of the i32 attribute holding the number of grid axes.
inline constexpr llvm::StringLiteral kGridRankAttrName = "pallas.grid_rank";
/// On a lowered gpu.func (and the llvm.func it becomes): how many of its last
/// parameters are TMA descriptors (CUtensorMap, 128 bytes, passed by value).
inline constexpr llvm::StringLiteral kTmaParamsAttrName = "pallas.tma_params";
/// Elements a dim of one TMA box (the EDSL's kTmaMaxBoxDim): a longer staged
/// block dim is several copies.
inline constexpr int64_t kTmaMaxBoxDim = 256;
/// The most stage buffers of a pipelined block (the EDSL's kMaxPipelineDepth).
inline constexpr int64_t kMaxStageBuffers = 16;
/// On an scf.for: a pipelined sequential loop; the staged blocks defined in
/// its body are its stages (pallas.block's `buffers`; PipelineRules.cpp).
inline constexpr llvm::StringLiteral kPipelineAttrName = "pallas.pipeline";
/// On a pipelined scf.for (i64, optional): Pallas' delay_release. Input
/// stage buffers of step k are refilled at the end of step k + delay.
inline constexpr llvm::StringLiteral kDelayReleaseAttrName = "pallas.delay_release";
/// On a pipelined scf.for (array<i64: producer, launch, consumer>,
/// optional): a warp-specialized pipeline (PipelineRules.cpp). The kernel
/// launches a producer warpgroup after its own with `launch` registers a
/// thread; setmaxnreg leaves the producer `producer` and the consumer
/// `consumer`.
inline constexpr llvm::StringLiteral kWarpSpecializedAttrName = "pallas.warp_specialized";
/// The text of the empty inline asm that fences a wgmma accumulator's
/// registers (MatmulRules.cpp, fenceOperands): its results are its operands,
/// redefined where it stands, so nothing reads them before a wgmma.wait_group
/// above it or writes them after a wgmma.fence below it (CUTLASS's
/// warpgroup_fence_operand). A PTX comment; the emulator passes the values
/// through.
inline constexpr llvm::StringLiteral kFenceOperandsAsm = "// pallas: fence wgmma operands";
/// The first line of the inline asm that copies a wgmma accumulator's
/// registers into new ones (MatmulRules.cpp, copyOperands: `mov`s, results
/// not tied to operands), so that an epilogue reading them leaves them
/// unwritten. The emulator passes the values through.
inline constexpr llvm::StringLiteral kCopyOperandsAsm = "// pallas: copy wgmma operands";
/// On the inline PTX of a wgmma with A in registers (the NVVM dialect has
/// no such op; MatmulRules.cpp, issueWgmmaRegisterA): array<i64: n, bf16,
/// trans_b>, what the emulator needs to run it. Operands: the n / 2
/// accumulator registers, A's 4 words, B's descriptor, scale-d (i32: 0 ignores the
/// accumulator's registers).
inline constexpr llvm::StringLiteral kWgmmaRegisterAAttrName = "pallas.wgmma_register_a";
/// On the inline PTX of a wgmma.wait_group that ptxas may not schedule above the work before
/// it (MatmulRules.cpp, emitPinnedWait): the i32 number of groups it leaves pending, for
/// the emulator, which runs it as that wait.
inline constexpr llvm::StringLiteral kPinnedWaitAttrName = "pallas.wgmma_wait_pinned";
/// On the llvm.store of a block value into an accumulator's registers (MatmulRules.cpp,
/// lowerAccumulatorStore; wgmma targets): the emulator checks first that no wgmma writing
/// those registers is still in flight.
inline constexpr llvm::StringLiteral kAccumulatorStoreAttrName = "pallas.accumulator_store";
/// Name of the array attribute holding the layout of each vector result of
/// an op (see PallasLayouts.td); set by pallas-assign-layouts.
inline constexpr llvm::StringLiteral kLayoutsAttrName = "pallas.layouts";
}  // namespace mlir::pallas

#endif  // PALLAS_DIALECT_PALLASDIALECT_H
