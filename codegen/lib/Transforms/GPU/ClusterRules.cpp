//===- ClusterRules.cpp - thread-block clusters on the GPU -----------------===//
//
// The programs of a thread-block cluster (sm_90) meet at cluster barriers and
// read each other's scratch (distributed shared memory):
//
//   pallas.cluster_barrier      barrier.cluster.arrive (release) + .wait
//                               (acquire) in a cluster of several; the
//                               program's own barrier in a cluster of one
//   pallas.cluster_peer %r, %k  the scratch block %r as the CTA of rank %k
//                               holds it: mapa of the buffer's address, a
//                               memref in the shared::cluster space (7) over
//                               it, so loads through it are the ordinary
//                               load rules' (ld.shared::cluster, 16 bytes a
//                               run where aligned)
//
// Worked example, a [128, 72] f32 scratch at shared offset 0x1000 of CTA 0,
// peer rank 2: mapa(0x1000, 2) is the shared::cluster address of CTA 2's
// byte 0x1000; element (5, 8) of the view is 0x1000 + (5 * 72 + 8) * 4 bytes
// past it there. sm_80 has no clusters: its cluster is one program, rank 0,
// and the view is the buffer itself.
//
//===----------------------------------------------------------------------===//

#include "GpuLowering.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace mlir::pallas::gpu_lowering {
namespace {

/// PTX's shared::cluster state space (LLVM NVPTX address space 7).
constexpr unsigned kSharedClusterSpace = 7;

LogicalResult lowerClusterBarrier(ClusterBarrierOp op, GpuLowering& g, OpBuilder& b) {
  Location loc = op.getLoc();
  Value size =
      arith::IndexCastUIOp::create(b, loc, b.getI32Type(), g.clusterValue(b, loc, /*size=*/true));
  g.clusterBarrier(b, loc, size, /*barSyncAlone=*/true);
  return success();
}

/// The peer's buffer as a memref<shape x T, 7>: the descriptor of the local
/// view's shape and strides around the mapa'd address.
LogicalResult lowerClusterPeer(ClusterPeerOp op, GpuLowering& g, OpBuilder& b) {
  Location loc = op.getLoc();
  const BlockRef& local = g.refs.at(op.getRef());
  auto localType = cast<MemRefType>(local.array.getType());
  if (!localType.getLayout().isIdentity())
    return op.emitOpError("views a scratch buffer whose layout is not row-major: ") << localType;
  BlockRef peer = local;
  if (g.cpAsync) {  // sm_80: a cluster of one, rank 0 is the program itself
    g.refs[op.getResult()] = peer;
    return success();
  }
  MLIRContext* ctx = b.getContext();
  auto ptr3 = LLVM::LLVMPointerType::get(ctx, 3);
  auto ptr7 = LLVM::LLVMPointerType::get(ctx, kSharedClusterSpace);
  Value addr = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, local.array);
  Value bits = arith::IndexCastUIOp::create(b, loc, b.getI64Type(), addr);
  Value mine = LLVM::IntToPtrOp::create(b, loc, ptr3, bits);
  Value rank = arith::IndexCastUIOp::create(b, loc, b.getI32Type(), g.map.lookup(op.getRank()));
  Value theirs = NVVM::MapaOp::create(b, loc, ptr7, mine, rank);
  // The descriptor {allocated, aligned, offset, sizes[], strides[]} of a static row-major buffer.
  const int64_t dimCount = localType.getRank();
  auto i64 = b.getI64Type();
  auto dims = LLVM::LLVMArrayType::get(i64, static_cast<unsigned>(dimCount));
  auto descType = LLVM::LLVMStructType::getLiteral(ctx, {ptr7, ptr7, i64, dims, dims});
  Value desc = LLVM::PoisonOp::create(b, loc, descType);
  auto c64 = [&](int64_t v) { return LLVM::ConstantOp::create(b, loc, i64, v).getResult(); };
  desc = LLVM::InsertValueOp::create(b, loc, desc, theirs, ArrayRef<int64_t>{0});
  desc = LLVM::InsertValueOp::create(b, loc, desc, theirs, ArrayRef<int64_t>{1});
  desc = LLVM::InsertValueOp::create(b, loc, desc, c64(0), ArrayRef<int64_t>{2});
  int64_t stride = 1;
  for (int64_t d = dimCount - 1; d >= 0; --d) {
    desc = LLVM::InsertValueOp::create(b, loc, desc, c64(localType.getDimSize(d)),
                                       ArrayRef<int64_t>{3, d});
    desc = LLVM::InsertValueOp::create(b, loc, desc, c64(stride), ArrayRef<int64_t>{4, d});
    stride *= localType.getDimSize(d);
  }
  auto peerType = MemRefType::get(localType.getShape(), localType.getElementType(), AffineMap(),
                                  b.getI64IntegerAttr(kSharedClusterSpace));
  peer.array = UnrealizedConversionCastOp::create(b, loc, peerType, desc).getResult(0);
  g.refs[op.getResult()] = peer;
  return success();
}

}  // namespace

void populateClusterRules(RuleRegistry& rules) {
  rules.add(ClusterBarrierOp::getOperationName(), ruleFor(lowerClusterBarrier));
  rules.add(ClusterPeerOp::getOperationName(), ruleFor(lowerClusterPeer));
}

}  // namespace mlir::pallas::gpu_lowering
