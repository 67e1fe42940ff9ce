//===- ConvertPallasToGPU.cpp - kernels to gpu.funcs, op by op through the rules -===//
//
// One program is one CTA. The pass outlines each kernel into a gpu.func and
// lowers its ops in order with the rules of GpuLowering.h, reading the
// layouts pallas-assign-layouts assigned; then it plans the kernel's shared
// memory (SharedMemoryPlan.h) and records its size on the module as
// `pallas.shared_bytes.<kernel>` for the launch metadata.
//
//===----------------------------------------------------------------------===//

#include "../ProgramSkeleton.h"
#include "GpuLowering.h"
#include "Splats.h"
#include "pallas/Transforms/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace mlir::pallas {
#define GEN_PASS_DEF_CONVERTPALLASTOGPU
#include "pallas/Transforms/Passes.h.inc"

namespace gpu_lowering {

//===----------------------------------------------------------------------===//
// RuleRegistry
//===----------------------------------------------------------------------===//

void RuleRegistry::add(StringRef opName, Rule rule) { byName_[opName.str()] = std::move(rule); }

void RuleRegistry::addFamily(StringRef description, std::function<bool(Operation*)> matches,
                             Rule rule) {
  families_.push_back({description.str(), std::move(matches), std::move(rule)});
}

const Rule* RuleRegistry::find(Operation* op) const {
  if (auto it = byName_.find(op->getName().getStringRef()); it != byName_.end()) return &it->second;
  for (const Family& f : families_)
    if (f.matches(op)) return &f.rule;
  return nullptr;
}

std::string RuleRegistry::known() const {
  std::string text;
  for (const auto& [name, rule] : byName_) text += (text.empty() ? "" : ", ") + name;
  for (const Family& f : families_) text += ", " + f.description;
  return text;
}

//===----------------------------------------------------------------------===//
// GpuLowering
//===----------------------------------------------------------------------===//

GpuLowering::GpuLowering(func::FuncOp kernel, gpu::GPUModuleOp gpuModule, const RuleRegistry& rules)
    : kernel(kernel), gpuModule_(gpuModule), rules_(rules) {}

Attribute GpuLowering::layoutOf(Value v) const {
  if (!isa<VectorType>(v.getType())) return {};
  Operation* owner;
  unsigned index;
  if (auto result = dyn_cast<OpResult>(v)) {
    owner = result.getOwner();
    index = result.getResultNumber();
  } else {  // a loop carry: the loop's result of the same position holds its layout
    auto arg = cast<BlockArgument>(v);
    owner = arg.getOwner()->getParentOp();
    index = arg.getArgNumber();
    if (auto loop = dyn_cast<scf::ForOp>(owner)) index -= loop.getNumInductionVars();
  }
  auto layouts = owner->getAttrOfType<ArrayAttr>(kLayoutsAttrName);
  if (!layouts || index >= layouts.size()) return {};
  return layouts[index];
}

VectorType GpuLowering::threadType(VectorType block, Attribute layout) const {
  if (isa<ReplicatedLayoutAttr>(layout)) return flat(block);
  if (auto rows = dyn_cast<StridedRowsLayoutAttr>(layout))
    return VectorType::get({rows.valuesPerThread(block.getNumElements())}, block.getElementType());
  if (auto tiled = dyn_cast<TiledLayoutAttr>(layout))
    return VectorType::get({tiled.registersPerThread(block.getShape())}, block.getElementType());
  auto s = cast<WarpgroupStridedLayoutAttr>(layout);
  return VectorType::get({s.fragmentSize(block)}, block.getElementType());
}

std::optional<SmallVector<int64_t>> rowRegisterOf(TiledLayoutAttr acc, ArrayRef<int64_t> accShape,
                                                  TiledLayoutAttr rows,
                                                  ArrayRef<int64_t> rowsShape) {
  // Registers are matched by the rows thread 0 holds: every thread's rows must
  // start at the same offset from thread 0's in both layouts.
  const int64_t threads = acc.threads(accShape);
  if (rows.threads(rowsShape) != threads) return std::nullopt;
  const int64_t acc0 = acc.elementAt(accShape, 0, 0, 0)[0];
  const int64_t rows0 = rows.elementAt(rowsShape, 0, 0, 0)[0];
  for (int64_t t = 0; t < threads; ++t)
    if (acc.elementAt(accShape, t / 32, t % 32, 0)[0] - acc0 !=
        rows.elementAt(rowsShape, t / 32, t % 32, 0)[0] - rows0)
      return std::nullopt;
  const int64_t rowRegisters = rows.registersPerThread(rowsShape);
  SmallVector<int64_t> map;
  for (int64_t r = 0; r < acc.registersPerThread(accShape); ++r) {
    const int64_t row = acc.elementAt(accShape, 0, 0, r)[0];
    int64_t j = 0;
    while (j < rowRegisters && rows.elementAt(rowsShape, 0, 0, j)[0] != row) ++j;
    if (j == rowRegisters) return std::nullopt;
    map.push_back(j);
  }
  return map;
}

SmallVector<Value> GpuLowering::tiledThreadOrigin(OpBuilder& b, Location loc,
                                                  TiledLayoutAttr layout, ArrayRef<int64_t> shape) {
  SmallVector<int64_t> zero = layout.elementAt(shape, 0, 0, 0);
  SmallVector<Value> origin;
  for (int64_t c : zero) origin.push_back(index(b, loc, c));
  // Worked example, the WGMMA accumulator of [64, N]: the warp digit (4 of
  // them) steps 16 rows; the lane digits step (1, 0) (8 of them) and (0, 2)
  // (4): thread 37 (warp 1, lane 5 = 1 * 4 + 1) starts at (16 + 1, 2).
  auto addDigits = [&](Value id, const SmallVector<TiledLayoutAttr::Digit>& digits) {
    int64_t unit = 1;
    for (const TiledLayoutAttr::Digit& d : llvm::reverse(digits)) {
      if (!d.step.empty()) {
        Value digit =
            arith::RemUIOp::create(b, loc, arith::DivUIOp::create(b, loc, id, index(b, loc, unit)),
                                   index(b, loc, d.extent));
        for (auto [o, step] : llvm::zip(origin, d.step))
          if (step != 0)
            o = arith::AddIOp::create(b, loc, o,
                                      arith::MulIOp::create(b, loc, digit, index(b, loc, step)));
      }
      unit *= d.extent;
    }
  };
  addDigits(arith::DivUIOp::create(b, loc, tid, index(b, loc, 32)), layout.warpDigits(shape));
  addDigits(arith::RemUIOp::create(b, loc, tid, index(b, loc, 32)), layout.laneDigits(shape));
  return origin;
}

void GpuLowering::forEachTiledElement(
    OpBuilder& b, Location loc, TiledLayoutAttr layout, ArrayRef<int64_t> shape,
    function_ref<void(int64_t reg, SmallVector<Value>& coords)> each) {
  SmallVector<Value> origin = tiledThreadOrigin(b, loc, layout, shape);
  for (int64_t r = 0; r < layout.registersPerThread(shape); ++r) {
    SmallVector<int64_t> at = layout.elementAt(shape, 0, 0, r);
    SmallVector<Value> coords;
    for (auto [o, c] : llvm::zip(origin, at))
      coords.push_back(arith::AddIOp::create(b, loc, o, index(b, loc, c)));
    each(r, coords);
  }
}

Value GpuLowering::runStart(OpBuilder& b, Location loc, int64_t r) {
  const int64_t threads = strided_.getThreads(), vec = strided_.getVec();
  Value t = arith::MulIOp::create(b, loc, tid, index(b, loc, vec));
  return arith::AddIOp::create(b, loc, t, index(b, loc, r * threads * vec));
}

Value GpuLowering::assemble(OpBuilder& b, Location loc, VectorType block,
                            function_ref<Value(int64_t r, SmallVector<Value>& coords)> run) {
  VectorType frag = threadType(block, strided_);
  Value acc = arith::ConstantOp::create(b, loc, b.getZeroAttr(frag));
  for (int64_t r = 0; r < runs(block); ++r) {
    SmallVector<Value> coords = unflatten(b, loc, runStart(b, loc, r), block.getShape());
    Value piece = run(r, coords);
    acc = vector::InsertStridedSliceOp::create(
        b, loc, piece, acc, ArrayRef<int64_t>{r * strided_.getVec()}, ArrayRef<int64_t>{1});
  }
  return acc;
}

void GpuLowering::storeRunsToShared(OpBuilder& b, Location loc, Value frag, VectorType block,
                                    Value buffer) {
  const int64_t vec = strided_.getVec();
  for (int64_t r = 0; r < runs(block); ++r) {
    Value run = vector::ExtractStridedSliceOp::create(b, loc, frag, ArrayRef<int64_t>{r * vec},
                                                      ArrayRef<int64_t>{vec}, ArrayRef<int64_t>{1});
    vector::StoreOp::create(b, loc, run, buffer, ValueRange{runStart(b, loc, r)});
  }
}

FailureOr<Value> GpuLowering::operandIn(OpBuilder& b, Location loc, Value v, Attribute layout) {
  if (layoutOf(v) == layout) return map.lookup(v);
  if (!isSplat(v)) return failure();
  VectorType type = threadType(cast<VectorType>(v.getType()), layout);
  if (auto bc = v.getDefiningOp<vector::BroadcastOp>(); bc && !isa<VectorType>(bc.getSourceType()))
    return vector::BroadcastOp::create(b, loc, type, map.lookup(bc.getSource())).getResult();
  if (auto cst = v.getDefiningOp<arith::ConstantOp>())
    if (auto splat = dyn_cast<SplatElementsAttr>(cst.getValue()))
      return arith::ConstantOp::create(b, loc, splat.resizeSplat(type)).getResult();
  return failure();
}

Value GpuLowering::sharedBuffer(OpBuilder& b, Location loc, int64_t elements, Type et,
                                SharedLifetime lifetime, int64_t align, StringRef purpose) {
  auto type = MemRefType::get({elements}, et);
  return sharedBuffer(b, loc, type, lifetime, align, purpose);
}

Value GpuLowering::sharedBuffer(OpBuilder& b, Location loc, MemRefType type,
                                SharedLifetime lifetime, int64_t align, StringRef purpose) {
  auto workgroup = gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  auto shared = MemRefType::get(type.getShape(), type.getElementType(), AffineMap(), workgroup);
  auto offset = arith::ConstantIndexOp::create(b, loc, 0);  // patched by the plan
  int64_t bytes = type.getNumElements() * type.getElementTypeBitWidth() / 8;
  bool kernelLong = lifetime == SharedLifetime::kKernel;
  bool scoped = lifetime == SharedLifetime::kScope;
  size_t entry = plan_.add({purpose.empty() ? "reduction and conversion buffers" : purpose.str(),
                            bytes, align, kernelLong ? 0 : currentRule_,
                            kernelLong || scoped ? INT64_MAX : currentRule_, offset});
  if (scoped) {
    assert(!scopes_.empty() && "a kScope buffer outside openScope/closeScope");
    scopes_.back().push_back(entry);
  }
  return memref::ViewOp::create(b, loc, shared, sharedBase_, offset, ValueRange{});
}

void GpuLowering::closeScope() {
  for (size_t entry : scopes_.back()) plan_.setEnd(entry, currentRule_);
  scopes_.pop_back();
}

OpBuilder GpuLowering::entryBuilder() {
  // After the thread id (the first op), before anything that uses an alloca.
  OpBuilder b(func.getContext());
  b.setInsertionPointAfter(tid.getDefiningOp());
  return b;
}

SmallVector<Value> GpuLowering::mapped(ValueRange values) const {
  SmallVector<Value> out;
  for (Value v : values) out.push_back(map.lookup(v));
  return out;
}

Value GpuLowering::isThread(OpBuilder& b, Location loc, int64_t t) {
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid, index(b, loc, t));
}

LogicalResult GpuLowering::lowerBlock(Block& block, OpBuilder& b) {
  for (Operation& op : block.without_terminator()) {
    if (failed(lowerOp(&op, b))) return failure();
    if (auto hook = afterLowering.find(&op); hook != afterLowering.end() && failed(hook->second(b)))
      return failure();
  }
  return success();
}

/// A program is a CTA: program_id is the block id, num_programs the grid dim.
const GridCoordinates& gpuGrid() {
  static const GridCoordinates grid = [] {
    auto dim = [](int32_t axis) {
      return axis == 0 ? gpu::Dimension::x : axis == 1 ? gpu::Dimension::y : gpu::Dimension::z;
    };
    GridCoordinates g;
    g.programId = [dim](OpBuilder& b, Location loc, int32_t axis) -> Value {
      return gpu::BlockIdOp::create(b, loc, dim(axis));
    };
    g.numPrograms = [dim](OpBuilder& b, Location loc, int32_t axis) -> Value {
      return gpu::GridDimOp::create(b, loc, dim(axis));
    };
    return g;
  }();
  return grid;
}

FailureOr<SmallVector<Value>> GpuLowering::lowerAgainWith(ArrayRef<Operation*> ops, Value from,
                                                          Value to, ValueRange values,
                                                          OpBuilder& b) {
  // What the re-lowering overwrites, to put back after.
  SmallVector<std::pair<Value, Value>> saved{{from, map.lookupOrNull(from)}};
  for (Operation* op : ops)
    for (Value r : op->getResults()) saved.push_back({r, map.lookupOrNull(r)});
  map.map(from, to);
  LogicalResult lowered = success();
  for (Operation* op : ops)
    if (failed(lowered = lowerOp(op, b))) break;
  SmallVector<Value> out;
  if (succeeded(lowered))
    for (Value v : values) out.push_back(map.lookupOrDefault(v));
  for (auto [v, old] : saved) {
    if (old)
      map.map(v, old);
    else
      map.erase(v);
  }
  if (failed(lowered)) return failure();
  return out;
}

Value GpuLowering::clusterValue(OpBuilder& b, Location loc, bool size) {
  if (cpAsync)  // sm_80 has no clusters (and no %cluster_* registers)
    return arith::ConstantIndexOp::create(b, loc, size ? 1 : 0);
  Value v = size ? NVVM::ClusterDim::create(b, loc, b.getI32Type()).getResult()
                 : NVVM::ClusterId::create(b, loc, b.getI32Type()).getResult();
  return arith::IndexCastUIOp::create(b, loc, b.getIndexType(), v);
}

void GpuLowering::clusterBarrier(OpBuilder& b, Location loc, Value size, bool barSyncAlone) {
  Value several = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, size,
                                        arith::ConstantIntOp::create(b, loc, b.getI32Type(), 1));
  auto branch = scf::IfOp::create(b, loc, several, /*withElseRegion=*/barSyncAlone);
  OpBuilder cb = OpBuilder::atBlockTerminator(branch.thenBlock());
  NVVM::ClusterArriveOp::create(cb, loc, UnitAttr());
  NVVM::ClusterWaitOp::create(cb, loc, UnitAttr());
  if (barSyncAlone) {
    OpBuilder eb = OpBuilder::atBlockTerminator(branch.elseBlock());
    gpu::BarrierOp::create(eb, loc);
  }
}

LogicalResult GpuLowering::lowerOp(Operation* op, OpBuilder& b) {
  ++currentRule_;
  if (lowerGridOp(op, map, b, gpuGrid())) return success();
  if (isa<ClusterRankOp, ClusterSizeOp>(op)) {
    map.map(op->getResult(0), clusterValue(b, op->getLoc(), isa<ClusterSizeOp>(op)));
    return success();
  }
  if (const Rule* rule = rules_.find(op)) return (*rule)(op, *this, b);
  return cloneScalarOp(op, map, b, "GPU", rules_.known());  // ProgramSkeleton.h
}

LogicalResult GpuLowering::run() {
  Location loc = kernel.getLoc();
  auto layouts = kernel->getAttrOfType<WarpgroupStridedLayoutAttr>("pallas.strided_layout");
  if (!layouts)
    return kernel.emitError(
        "kernel has no layouts; run pallas-assign-layouts before "
        "convert-pallas-to-gpu");
  strided_ = layouts;
  approxTranscendentals = kernel->hasAttr("pallas.approx_math");  // set by the tracer
  const int64_t threads = strided_.getThreads();
  OpBuilder mb = OpBuilder::atBlockEnd(gpuModule_.getBody());
  // Arrays with a staged block get a TMA descriptor parameter each, after the
  // kernel's own parameters, in argument order (the entry point passes them
  // so: Emitter.cpp). pallas-mark-tma-descriptor-params makes them byval.
  SmallVector<BlockArgument> tmaArrays;
  auto usesDescriptor = [&](Value array) {
    auto arg = dyn_cast<BlockArgument>(array);
    if (arg && arg.getOwner()->getParentOp() == kernel && !llvm::is_contained(tmaArrays, arg))
      tmaArrays.push_back(arg);
  };
  kernel.walk([&](Operation* op) {
    if (auto blk = dyn_cast<BlockOp>(op); blk && blk.getStaged()) usesDescriptor(blk.getArray());
    // Explicit copies of the TMA instance (the _direct one's copy through registers).
    if (auto in = dyn_cast<CopyToSharedOp>(op); in && !in.getDirect())
      usesDescriptor(in.getArray());
    if (auto out = dyn_cast<CopyToGlobalOp>(op); out && !out.getDirect())
      usesDescriptor(out.getArray());
    if (auto pre = dyn_cast<PrefetchOp>(op); pre && !pre.getDirect())
      usesDescriptor(pre.getArray());
  });
  llvm::sort(tmaArrays,
             [](BlockArgument a, BlockArgument b) { return a.getArgNumber() < b.getArgNumber(); });
  SmallVector<Type> params(kernel.getFunctionType().getInputs());
  params.append(tmaArrays.size(), LLVM::LLVMPointerType::get(mb.getContext()));
  auto f =
      gpu::GPUFuncOp::create(mb, loc, kernel.getSymName(), mb.getFunctionType(params, TypeRange{}));
  if (!tmaArrays.empty())
    f->setAttr(kTmaParamsAttrName, mb.getI64IntegerAttr(static_cast<int64_t>(tmaArrays.size())));
  f->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), mb.getUnitAttr());
  // A warp-specialized pipeline launches its producer warpgroup after the
  // kernel's (PipelineRules.cpp) where TMA copies; layouts span the kernel's
  // own threads. The cp.async form has no producer.
  bool warpSpecialized = false;
  kernel.walk([&](scf::ForOp loop) { warpSpecialized |= loop->hasAttr(kWarpSpecializedAttrName); });
  const int64_t launched = threads + (warpSpecialized && !cpAsync ? 128 : 0);
  f.setKnownBlockSizeAttr(mb.getDenseI32ArrayAttr({static_cast<int32_t>(launched), 1, 1}));
  // At least kMinThreadsPerSM resident threads (.minnctapersm): with four 16-byte loads
  // per thread per chunk, 384 threads keep 24 KiB in flight per SM, about what covers
  // the memory latency at full bandwidth. It also gives ptxas a register budget (170 for
  // 128 threads) to keep to instead of its own occupancy target, which it reaches by
  // spilling (rms_norm_residual_f16: 80 registers and 16 bytes of spills without it, 105
  // and none with it; layer_norm_residual_f32 needs 138).
  // A spec's own bound (KernelSpec::max_registers, `pallas.max_registers`)
  // replaces it.
  constexpr int64_t kMinThreadsPerSM = 384;
  if (warpSpecialized && cpAsync)  // sm_80 has no setmaxnreg: the consumer keeps what it needs
    f->setAttr(
        NVVM::NVVMDialect::getMaxnregAttrName(),
        mb.getI32IntegerAttr(static_cast<int32_t>(std::min<int64_t>(255, 65536 / launched))));
  else if (auto cap = kernel->getAttrOfType<IntegerAttr>("pallas.max_registers"))
    f->setAttr(NVVM::NVVMDialect::getMaxnregAttrName(),
               mb.getI32IntegerAttr(static_cast<int32_t>(cap.getInt())));
  else
    f->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(),
               mb.getI32IntegerAttr(
                   static_cast<int32_t>(std::max<int64_t>(1, kMinThreadsPerSM / launched))));
  func = f;
  Block& entry = f.getBody().front();
  for (auto [from, to] : llvm::zip(kernel.getArguments(), entry.getArguments())) map.map(from, to);
  for (auto [k, arg] : llvm::enumerate(tmaArrays))
    tmaDescriptors[arg] = entry.getArgument(kernel.getNumArguments() + k);
  OpBuilder b = OpBuilder::atBlockEnd(&entry);
  tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  // Thread 0 brings each TMA descriptor (a 128-byte kernel parameter) into the tensormap cache
  // first thing (`prefetch.tensormap`, as CUTLASS's kernels do), so that the first copy of each
  // array does not also wait for its descriptor's fetch: the barrier inits, the CTA barrier
  // and the first block's index math run meanwhile. In parameter order (tmaArrays). The
  // descriptor is a parameter (byval, grid-constant), so the prefetch names the parameter
  // space (`prefetch.param.tensormap`): through the generic address LLVM 22 emitted it twice
  // (`prefetch.param.tensormap` and `prefetch.tensormap`, two UTMACCTL.PF a descriptor).
  if (usesTma()) {
    Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid,
                                        arith::ConstantIndexOp::create(b, loc, 0));
    auto once = scf::IfOp::create(b, loc, first, /*withElseRegion=*/false);
    OpBuilder tb = once.getThenBodyBuilder();
    for (BlockArgument array : tmaArrays)
      NVVM::PrefetchOp::create(tb, loc, /*cacheLevel=*/nullptr, /*evictPriority=*/nullptr,
                               tmaDescriptors.lookup(array), /*predicate=*/Value(),
                               /*tensormap=*/true, /*uniform=*/false, /*in_param_space=*/true);
  }
  auto bytes =
      MemRefType::get({ShapedType::kDynamic}, b.getI8Type(), AffineMap(),
                      gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup));
  auto base = gpu::DynamicSharedMemoryOp::create(b, loc, bytes);
  sharedBase_ = base;
  if (failed(lowerBlock(kernel.getBody().front(), b))) return failure();
  // A warp-specialized pipeline left `b` in its consumer branch (the rest of
  // the kernel is the consumer's); its barriers are the consumer's own.
  if (warpSpecialized) {
    waitForStagedInputs(*this, b);
    copyOutStagedBlocks(*this, b);
    f.walk([&](scf::IfOp consumer) {
      if (!consumer->hasAttr("pallas.consumer")) return;
      consumer.walk([&](gpu::BarrierOp bar) {
        OpBuilder rb(bar);
        auto c32 = [&](int64_t v) {
          return arith::ConstantIntOp::create(rb, bar.getLoc(), rb.getI32Type(), v).getResult();
        };
        NVVM::BarrierOp::create(rb, bar.getLoc(), TypeRange{}, c32(kConsumerBarrier), c32(threads),
                                NVVM::BarrierReductionAttr(), Value());
        bar.erase();
      });
    });
    b.setInsertionPointToEnd(&entry);
  } else {
    waitForStagedInputs(*this, b);
    copyOutStagedBlocks(*this, b);
  }
  if (clusterSyncAtExit) {  // every thread, producer too: no CTA leaves while a peer may reach it
    Value size =
        arith::IndexCastUIOp::create(b, loc, b.getI32Type(), clusterValue(b, loc, /*size=*/true));
    clusterBarrier(b, loc, size, /*barSyncAlone=*/false);
  }
  gpu::ReturnOp::create(b, loc);

  int64_t sharedBytes = plan_.assign();
  if (sharedBytes > SharedMemoryPlan::kMaxBytes)
    return kernel.emitError() << "a program needs " << sharedBytes
                              << " bytes of shared memory, more than the "
                              << SharedMemoryPlan::kMaxBytes
                              << " a Hopper program may have; its buffers:" << plan_.describe();
  if (sharedBytes == 0) base.erase();
  ModuleOp module = kernel->getParentOfType<ModuleOp>();
  module->setAttr(("pallas.shared_bytes." + kernel.getSymName()).str(),
                  mb.getI64IntegerAttr(sharedBytes));
  module->setAttr(("pallas.shared_align." + kernel.getSymName()).str(),
                  mb.getI64IntegerAttr(plan_.maxAlign()));
  kernel.erase();
  return success();
}

}  // namespace gpu_lowering

namespace {

struct ConvertPallasToGPUPass : impl::ConvertPallasToGPUBase<ConvertPallasToGPUPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> kernels;
    module.walk([&](func::FuncOp f) {
      if (f->hasAttr(kKernelAttrName)) kernels.push_back(f);
    });
    if (kernels.empty()) return;
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), UnitAttr::get(&getContext()));
    auto gpuModule = module.lookupSymbol<gpu::GPUModuleOp>("pallas_kernels");
    if (!gpuModule) {
      OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
      gpuModule = gpu::GPUModuleOp::create(b, module.getLoc(), "pallas_kernels");
    }
    gpu_lowering::RuleRegistry rules;
    gpu_lowering::populateLoadStoreRules(rules);
    gpu_lowering::populateElementwiseRules(rules);
    gpu_lowering::populateReductionRules(rules);
    gpu_lowering::populateControlFlowRules(rules);
    gpu_lowering::populateSemaphoreRules(rules);
    gpu_lowering::populateLayoutConversionRules(rules);
    gpu_lowering::populateAsyncCopyRules(rules);
    gpu_lowering::populateMatmulRules(rules);
    gpu_lowering::populateClusterRules(rules);
    if (asyncCopies != "tma" && asyncCopies != "cp-async") {
      module.emitError() << "convert-pallas-to-gpu: async-copies='" << asyncCopies
                         << "'; expected 'tma' or 'cp-async'";
      return signalPassFailure();
    }
    if (mma != "wgmma" && mma != "mma_sync") {
      module.emitError() << "convert-pallas-to-gpu: mma='" << mma
                         << "'; expected 'wgmma' or 'mma_sync'";
      return signalPassFailure();
    }
    for (func::FuncOp k : kernels) {
      gpu_lowering::GpuLowering lowering(k, gpuModule, rules);
      lowering.cpAsync = asyncCopies == "cp-async";
      lowering.wgmma = mma == "wgmma";
      if (failed(lowering.run())) return signalPassFailure();
    }
  }
};

}  // namespace
}  // namespace mlir::pallas
