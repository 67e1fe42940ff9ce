// Small kernels declared to plant one bug each (and their correct twins) for
// the emulator's checks. Compiled by `pallas-codegen --emulate-gpu-module`;
// every kernel runs 128 threads (one CTA) unless the test says otherwise.
module attributes {gpu.container_module} {
  gpu.module @planted {
    // out[tid + 1] = 1: thread 127 stores one element past the end.
    gpu.func @off_by_one(%out: memref<?xf32>) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %tid = gpu.thread_id x
      %c1 = arith.constant 1 : index
      %i = arith.addi %tid, %c1 : index
      %one = arith.constant 1.0 : f32
      memref.store %one, %out[%i] : memref<?xf32>
      gpu.return
    }

    // Each thread writes smem[tid] and reads its neighbour's element; without
    // the barrier the read races with the neighbour's write.
    gpu.func @missing_barrier(%out: memref<?xf32>) workgroup(%smem: memref<128xf32, #gpu.address_space<workgroup>>) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %tid = gpu.thread_id x
      %c1 = arith.constant 1 : index
      %c128 = arith.constant 128 : index
      %t = arith.index_cast %tid : index to i32
      %v = arith.sitofp %t : i32 to f32
      memref.store %v, %smem[%tid] : memref<128xf32, #gpu.address_space<workgroup>>
      %n = arith.addi %tid, %c1 : index
      %j = arith.remui %n, %c128 : index
      %w = memref.load %smem[%j] : memref<128xf32, #gpu.address_space<workgroup>>
      memref.store %w, %out[%tid] : memref<?xf32>
      gpu.return
    }

    gpu.func @with_barrier(%out: memref<?xf32>) workgroup(%smem: memref<128xf32, #gpu.address_space<workgroup>>) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %tid = gpu.thread_id x
      %c1 = arith.constant 1 : index
      %c128 = arith.constant 128 : index
      %t = arith.index_cast %tid : index to i32
      %v = arith.sitofp %t : i32 to f32
      memref.store %v, %smem[%tid] : memref<128xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      %n = arith.addi %tid, %c1 : index
      %j = arith.remui %n, %c128 : index
      %w = memref.load %smem[%j] : memref<128xf32, #gpu.address_space<workgroup>>
      memref.store %w, %out[%tid] : memref<?xf32>
      gpu.return
    }

    // Static shared memory (64 i32) and dynamic shared memory (128 f32 viewed
    // from bytes, laid out after the static part): out[t] = dyn[t ^ 1] + stat[t % 64].
    gpu.func @dynamic_shared(%out: memref<?xf32>) workgroup(%stat: memref<64xi32, #gpu.address_space<workgroup>>) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c64 = arith.constant 64 : index
      %bytes = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
      %dyn = memref.view %bytes[%c0][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<128xf32, #gpu.address_space<workgroup>>
      %t = arith.index_cast %tid : index to i32
      %f = arith.sitofp %t : i32 to f32
      memref.store %f, %dyn[%tid] : memref<128xf32, #gpu.address_space<workgroup>>
      %low = arith.cmpi ult, %tid, %c64 : index
      scf.if %low {
        %ten = arith.constant 1000 : i32
        %s = arith.muli %t, %ten : i32
        memref.store %s, %stat[%tid] : memref<64xi32, #gpu.address_space<workgroup>>
      }
      gpu.barrier
      %other = arith.xori %tid, %c1 : index
      %d = memref.load %dyn[%other] : memref<128xf32, #gpu.address_space<workgroup>>
      %k = arith.remui %tid, %c64 : index
      %sv = memref.load %stat[%k] : memref<64xi32, #gpu.address_space<workgroup>>
      %sf = arith.sitofp %sv : i32 to f32
      %r = arith.addf %d, %sf : f32
      memref.store %r, %out[%tid] : memref<?xf32>
      gpu.return
    }

    // Only the first 64 threads reach the barrier; the others exit.
    gpu.func @divergent_barrier(%out: memref<?xf32>) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %tid = gpu.thread_id x
      %c64 = arith.constant 64 : index
      %low = arith.cmpi ult, %tid, %c64 : index
      scf.if %low {
        gpu.barrier
      }
      %one = arith.constant 1.0 : f32
      memref.store %one, %out[%tid] : memref<?xf32>
      gpu.return
    }

    // Butterfly sum over each warp: every lane ends with its warp's sum.
    gpu.func @warp_sum(%in: memref<?xf32>, %out: memref<?xf32>) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %tid = gpu.thread_id x
      %v0 = memref.load %in[%tid] : memref<?xf32>
      %w = arith.constant 32 : i32
      %o16 = arith.constant 16 : i32
      %o8 = arith.constant 8 : i32
      %o4 = arith.constant 4 : i32
      %o2 = arith.constant 2 : i32
      %o1 = arith.constant 1 : i32
      %s16, %p16 = gpu.shuffle xor %v0, %o16, %w : f32
      %v1 = arith.addf %v0, %s16 : f32
      %s8, %p8 = gpu.shuffle xor %v1, %o8, %w : f32
      %v2 = arith.addf %v1, %s8 : f32
      %s4, %p4 = gpu.shuffle xor %v2, %o4, %w : f32
      %v3 = arith.addf %v2, %s4 : f32
      %s2, %p2 = gpu.shuffle xor %v3, %o2, %w : f32
      %v4 = arith.addf %v3, %s2 : f32
      %s1, %p1 = gpu.shuffle xor %v4, %o1, %w : f32
      %v5 = arith.addf %v4, %s1 : f32
      memref.store %v5, %out[%tid] : memref<?xf32>
      gpu.return
    }

    // up by 1 and down by 3 over the warp, with their in-range predicates,
    // and (straight NVVM) idx 5 within segments of 8 lanes: c = 0x1807 is
    // segmask 24 << 8 | clamp 7.
    gpu.func @shuffle_modes(%in: memref<?xi32>, %up: memref<?xi32>, %down: memref<?xi32>, %idx: memref<?xi32>, %valid: memref<?xi32>) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
      %tid = gpu.thread_id x
      %v = memref.load %in[%tid] : memref<?xi32>
      %c1 = arith.constant 1 : i32
      %c3 = arith.constant 3 : i32
      %c5 = arith.constant 5 : i32
      %c8 = arith.constant 8 : i32
      %c32 = arith.constant 32 : i32
      %u, %pu = gpu.shuffle up %v, %c1, %c32 : i32
      %d, %pd = gpu.shuffle down %v, %c3, %c32 : i32
      %all = arith.constant -1 : i32
      %seg = arith.constant 6151 : i32
      %x = nvvm.shfl.sync idx %all, %v, %c5, %seg : i32 -> i32
      memref.store %u, %up[%tid] : memref<?xi32>
      memref.store %d, %down[%tid] : memref<?xi32>
      memref.store %x, %idx[%tid] : memref<?xi32>
      %bu = arith.extui %pu : i1 to i32
      %bd = arith.extui %pd : i1 to i32
      %two = arith.constant 2 : i32
      %bd2 = arith.muli %bd, %two : i32
      %b = arith.addi %bu, %bd2 : i32
      memref.store %b, %valid[%tid] : memref<?xi32>
      gpu.return
    }

    // match.sync any (lanes holding the same value), redux.sync add and umax.
    gpu.func @match_redux(%in: memref<?xi32>, %same: memref<?xi32>, %sum: memref<?xi32>, %umax: memref<?xi32>) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
      %tid = gpu.thread_id x
      %v = memref.load %in[%tid] : memref<?xi32>
      %all = arith.constant -1 : i32
      %m = nvvm.match.sync any %all, %v : i32 -> i32
      %s = nvvm.redux.sync add %v, %all : i32 -> i32
      %u = nvvm.redux.sync umax %v, %all : i32 -> i32
      memref.store %m, %same[%tid] : memref<?xi32>
      memref.store %s, %sum[%tid] : memref<?xi32>
      memref.store %u, %umax[%tid] : memref<?xi32>
      gpu.return
    }

    // Thread 0 takes a semaphore and never gives it back.
    gpu.func @leaves_semaphore(%sem: memref<?xi32>) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %first = arith.cmpi eq, %tid, %c0 : index
      scf.if %first {
        %one = arith.constant 1 : i32
        %old = memref.atomic_rmw addi %one, %sem[%c0] : (i32, memref<?xi32>) -> i32
      }
      gpu.return
    }

    // Two CTAs: CTA 0 spins (acquire loads) until CTA 1 releases the flag,
    // then clears it. Needs both CTAs resident.
    gpu.func @cross_cta_flag(%flag: memref<?xi32>, %out: memref<?xi32>) kernel attributes {known_block_size = array<i32: 32, 1, 1>} {
      %bid = gpu.block_id x
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %zero = arith.constant 0 : i32
      %one = arith.constant 1 : i32
      %base = memref.extract_aligned_pointer_as_index %flag : memref<?xi32> -> index
      %addr = arith.index_cast %base : index to i64
      %p = llvm.inttoptr %addr : i64 to !llvm.ptr
      %first = arith.cmpi eq, %bid, %c0 : index
      %lane0 = arith.cmpi eq, %tid, %c0 : index
      %leader = arith.andi %first, %lane0 : i1
      scf.if %leader {
        scf.while : () -> () {
          %f = llvm.load %p atomic acquire {alignment = 4 : i64} : !llvm.ptr -> i32
          %wait = arith.cmpi eq, %f, %zero : i32
          scf.condition(%wait)
        } do {
          scf.yield
        }
        llvm.store %zero, %p atomic release {alignment = 4 : i64} : i32, !llvm.ptr
        memref.store %one, %out[%c0] : memref<?xi32>
      }
      %second = arith.cmpi ne, %bid, %c0 : index
      %releaser = arith.andi %second, %lane0 : i1
      scf.if %releaser {
        llvm.store %one, %p atomic release {alignment = 4 : i64} : i32, !llvm.ptr
      }
      gpu.return
    }

    // A 16-byte load declared 16-byte aligned at an address 4 bytes past an
    // aligned one: the GPU faults with a misaligned address.
    gpu.func @misaligned_vector(%out: memref<?xf32>) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %base = memref.extract_aligned_pointer_as_index %out : memref<?xf32> -> index
      %c4 = arith.constant 4 : index
      %off = arith.addi %base, %c4 : index
      %addr = arith.index_cast %off : index to i64
      %p = llvm.inttoptr %addr : i64 to !llvm.ptr
      %v = llvm.load %p {alignment = 16 : i64} : !llvm.ptr -> vector<4xf32>
      llvm.store %v, %p {alignment = 4 : i64} : vector<4xf32>, !llvm.ptr
      gpu.return
    }

    // Waits for a flag nobody sets, sleeping between polls.
    gpu.func @waits_forever(%flag: memref<?xi32>) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %c0 = arith.constant 0 : index
      %zero = arith.constant 0 : i32
      %ns = arith.constant 100 : i32
      scf.while : () -> () {
        %f = memref.load %flag[%c0] : memref<?xi32>
        %wait = arith.cmpi eq, %f, %zero : i32
        scf.condition(%wait)
      } do {
        nvvm.nanosleep %ns
        scf.yield
      }
      gpu.return
    }

    // Every thread waits for phase 0 of an mbarrier that expects two
    // arrivals; only thread 0 arrives, so the phase never completes.
    gpu.func @mbarrier_never_completes(%out: memref<?xf32>) workgroup(%bar: memref<1xi64, #gpu.address_space<workgroup>> {llvm.align = 8 : i64}) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %arrivals = arith.constant 2 : i32
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %is0 = arith.cmpi eq, %tid, %c0 : index
      %idx = memref.extract_aligned_pointer_as_index %bar : memref<1xi64, #gpu.address_space<workgroup>> -> index
      %i64 = arith.index_cast %idx : index to i64
      %p = llvm.inttoptr %i64 : i64 to !llvm.ptr<3>
      %zero = arith.constant 0 : i32
      %ticks = arith.constant 1000 : i32
      scf.if %is0 {
        nvvm.mbarrier.init %p, %arrivals : !llvm.ptr<3>, i32
      }
      gpu.barrier
      scf.if %is0 {
        nvvm.mbarrier.arrive.expect_tx %p, %zero : !llvm.ptr<3>, i32
      }
      nvvm.mbarrier.try_wait.parity %p, %zero, %ticks : !llvm.ptr<3>, i32, i32
      %one = arith.constant 1.0 : f32
      memref.store %one, %out[%tid] : memref<?xf32>
      gpu.return
    }

    // The twin: one expected arrival, thread 0's; every thread passes the wait.
    // (An mbarrier is 8-byte aligned: without llvm.align the emulator places
    // the attribution at its 4-byte default and reports the misaligned barrier.)
    gpu.func @mbarrier_completes(%out: memref<?xf32>) workgroup(%bar: memref<1xi64, #gpu.address_space<workgroup>> {llvm.align = 8 : i64}) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %arrivals = arith.constant 1 : i32
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %is0 = arith.cmpi eq, %tid, %c0 : index
      %idx = memref.extract_aligned_pointer_as_index %bar : memref<1xi64, #gpu.address_space<workgroup>> -> index
      %i64 = arith.index_cast %idx : index to i64
      %p = llvm.inttoptr %i64 : i64 to !llvm.ptr<3>
      %zero = arith.constant 0 : i32
      %ticks = arith.constant 1000 : i32
      scf.if %is0 {
        nvvm.mbarrier.init %p, %arrivals : !llvm.ptr<3>, i32
      }
      gpu.barrier
      scf.if %is0 {
        nvvm.mbarrier.arrive.expect_tx %p, %zero : !llvm.ptr<3>, i32
      }
      nvvm.mbarrier.try_wait.parity %p, %zero, %ticks : !llvm.ptr<3>, i32, i32
      %one = arith.constant 1.0 : f32
      memref.store %one, %out[%tid] : memref<?xf32>
      gpu.return
    }
    // A cluster of two CTAs (LaunchConfig::cluster 2): thread 0 of each
    // arrives on its own barrier and, through mapa, on its peer's (2
    // arrivals each); every thread waits for its barrier's phase, stores its
    // rank, and meets the cluster at exit, where thread 1 arrives and exits
    // without waiting (barrier.cluster counts the threads that have not
    // exited). With %early the CTAs meet with bar.sync only, not
    // barrier.cluster, so thread 0's mapa may reach a peer that has not
    // started.
    gpu.func @cluster_release(%out: memref<?xi32>, %early: i1) workgroup(%bar: memref<1xi64, #gpu.address_space<workgroup>> {llvm.align = 8 : i64}) kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %true = arith.constant true
      %is0 = arith.cmpi eq, %tid, %c0 : index
      %is1 = arith.cmpi eq, %tid, %c1 : index
      %idx = memref.extract_aligned_pointer_as_index %bar : memref<1xi64, #gpu.address_space<workgroup>> -> index
      %i64 = arith.index_cast %idx : index to i64
      %p = llvm.inttoptr %i64 : i64 to !llvm.ptr<3>
      %two = arith.constant 2 : i32
      %zero = arith.constant 0 : i32
      %one = arith.constant 1 : i32
      %ticks = arith.constant 1000 : i32
      %rank = nvvm.read.ptx.sreg.cluster.ctarank : i32
      %peer = arith.xori %rank, %one : i32
      scf.if %is0 {
        nvvm.mbarrier.init %p, %two : !llvm.ptr<3>, i32
        nvvm.fence.mbarrier.init
      }
      %late = arith.xori %early, %true : i1
      scf.if %late {
        nvvm.cluster.arrive
        nvvm.cluster.wait
      } else {
        gpu.barrier
      }
      scf.if %is0 {
        %remote = nvvm.mapa %p, %peer : !llvm.ptr<3> -> !llvm.ptr<7>
        nvvm.mbarrier.arrive %remote : !llvm.ptr<7>
        %state = nvvm.mbarrier.arrive %p : !llvm.ptr<3> -> i64
      }
      nvvm.mbarrier.try_wait.parity %p, %zero, %ticks : !llvm.ptr<3>, i32, i32
      %cta = gpu.block_id x
      %c64 = arith.constant 64 : index
      %base = arith.muli %cta, %c64 : index
      %at = arith.addi %base, %tid : index
      memref.store %rank, %out[%at] : memref<?xi32>
      nvvm.cluster.arrive
      %waits = arith.xori %is1, %true : i1
      scf.if %waits {
        nvvm.cluster.wait
      }
      gpu.return
    }

      // --- Asynchronous copies (TMA): the checks of emulator/src/tma.cc -------
    // %desc is an EmuTensorMap over a 1-D f32 array of 256 elements, box 256
    // (1024 bytes); %buf is its 128-aligned stage buffer.

    // Thread 0 issues the copy and every thread reads the stage without
    // waiting for the mbarrier phase the copy completes: it could see the
    // stage's old contents.
    gpu.func @tma_read_before_wait(%out: memref<?xf32>, %desc: !llvm.ptr) workgroup(%bar: memref<1xi64, #gpu.address_space<workgroup>> {llvm.align = 8 : i64}, %buf: memref<256xf32, #gpu.address_space<workgroup>> {llvm.align = 128 : i64}) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %is0 = arith.cmpi eq, %tid, %c0 : index
      %bi = memref.extract_aligned_pointer_as_index %bar : memref<1xi64, #gpu.address_space<workgroup>> -> index
      %b64 = arith.index_cast %bi : index to i64
      %p = llvm.inttoptr %b64 : i64 to !llvm.ptr<3>
      %si = memref.extract_aligned_pointer_as_index %buf : memref<256xf32, #gpu.address_space<workgroup>> -> index
      %s64 = arith.index_cast %si : index to i64
      %s3 = llvm.inttoptr %s64 : i64 to !llvm.ptr<3>
      %dst = llvm.addrspacecast %s3 : !llvm.ptr<3> to !llvm.ptr<7>
      %one = arith.constant 1 : i32
      %bytes = arith.constant 1024 : i32
      %origin = arith.constant 0 : i32
      scf.if %is0 {
        nvvm.mbarrier.init %p, %one : !llvm.ptr<3>, i32
        nvvm.mbarrier.arrive.expect_tx %p, %bytes : !llvm.ptr<3>, i32
        nvvm.cp.async.bulk.tensor.shared.cluster.global %dst, %desc, %p, box[%origin] : !llvm.ptr<7>, !llvm.ptr
      }
      gpu.barrier
      %v = memref.load %buf[%tid] : memref<256xf32, #gpu.address_space<workgroup>>
      memref.store %v, %out[%tid] : memref<?xf32>
      gpu.return
    }

    // The twin, and the expect-tx pair: thread 0 announces %expect bytes
    // (1024 is right; 512 is fewer than the copy brings, 2048 more than it
    // brings, so the phase never completes), every thread waits for phase 0
    // and reads its element.
    gpu.func @tma_expect_tx(%out: memref<?xf32>, %desc: !llvm.ptr, %expect: i32) workgroup(%bar: memref<1xi64, #gpu.address_space<workgroup>> {llvm.align = 8 : i64}, %buf: memref<256xf32, #gpu.address_space<workgroup>> {llvm.align = 128 : i64}) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %is0 = arith.cmpi eq, %tid, %c0 : index
      %bi = memref.extract_aligned_pointer_as_index %bar : memref<1xi64, #gpu.address_space<workgroup>> -> index
      %b64 = arith.index_cast %bi : index to i64
      %p = llvm.inttoptr %b64 : i64 to !llvm.ptr<3>
      %si = memref.extract_aligned_pointer_as_index %buf : memref<256xf32, #gpu.address_space<workgroup>> -> index
      %s64 = arith.index_cast %si : index to i64
      %s3 = llvm.inttoptr %s64 : i64 to !llvm.ptr<3>
      %dst = llvm.addrspacecast %s3 : !llvm.ptr<3> to !llvm.ptr<7>
      %one = arith.constant 1 : i32
      %origin = arith.constant 0 : i32
      %ticks = arith.constant 1000 : i32
      scf.if %is0 {
        nvvm.mbarrier.init %p, %one : !llvm.ptr<3>, i32
      }
      gpu.barrier
      scf.if %is0 {
        nvvm.mbarrier.arrive.expect_tx %p, %expect : !llvm.ptr<3>, i32
        nvvm.cp.async.bulk.tensor.shared.cluster.global %dst, %desc, %p, box[%origin] : !llvm.ptr<7>, !llvm.ptr
      }
      nvvm.mbarrier.try_wait.parity %p, %origin, %ticks : !llvm.ptr<3>, i32, i32
      %v = memref.load %buf[%tid] : memref<256xf32, #gpu.address_space<workgroup>>
      memref.store %v, %out[%tid] : memref<?xf32>
      gpu.return
    }

    // Thread 0 copies a stage the program never reads (attention's causal
    // programs that see no key never read Q's block): with %wait every thread
    // still waits for the copy's phase before the program ends; without it
    // the copy may land in shared memory the next program owns.
    gpu.func @tma_never_awaited(%out: memref<?xf32>, %desc: !llvm.ptr, %wait: i1) workgroup(%bar: memref<1xi64, #gpu.address_space<workgroup>> {llvm.align = 8 : i64}, %buf: memref<256xf32, #gpu.address_space<workgroup>> {llvm.align = 128 : i64}) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %is0 = arith.cmpi eq, %tid, %c0 : index
      %bi = memref.extract_aligned_pointer_as_index %bar : memref<1xi64, #gpu.address_space<workgroup>> -> index
      %b64 = arith.index_cast %bi : index to i64
      %p = llvm.inttoptr %b64 : i64 to !llvm.ptr<3>
      %si = memref.extract_aligned_pointer_as_index %buf : memref<256xf32, #gpu.address_space<workgroup>> -> index
      %s64 = arith.index_cast %si : index to i64
      %s3 = llvm.inttoptr %s64 : i64 to !llvm.ptr<3>
      %dst = llvm.addrspacecast %s3 : !llvm.ptr<3> to !llvm.ptr<7>
      %one = arith.constant 1 : i32
      %bytes = arith.constant 1024 : i32
      %origin = arith.constant 0 : i32
      %ticks = arith.constant 1000 : i32
      scf.if %is0 {
        nvvm.mbarrier.init %p, %one : !llvm.ptr<3>, i32
        nvvm.mbarrier.arrive.expect_tx %p, %bytes : !llvm.ptr<3>, i32
        nvvm.cp.async.bulk.tensor.shared.cluster.global %dst, %desc, %p, box[%origin] : !llvm.ptr<7>, !llvm.ptr
      }
      gpu.barrier
      scf.if %wait {
        nvvm.mbarrier.try_wait.parity %p, %origin, %ticks : !llvm.ptr<3>, i32, i32
      }
      %zero = arith.constant 0.0 : f32
      memref.store %zero, %out[%tid] : memref<?xf32>
      gpu.return
    }

    // One stage used twice: thread 0 (the producer) fills it, every thread
    // waits for phase 0 and reads its element; the producer refills it (phase
    // 1) and every thread reads again. With %release the threads pass a
    // barrier before the refill (they released the stage); without it the
    // refill overwrites elements other threads have just read.
    gpu.func @tma_stage_reuse(%out: memref<?xf32>, %desc: !llvm.ptr, %release: i1) workgroup(%bar: memref<1xi64, #gpu.address_space<workgroup>> {llvm.align = 8 : i64}, %buf: memref<256xf32, #gpu.address_space<workgroup>> {llvm.align = 128 : i64}) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %producer = arith.cmpi eq, %tid, %c0 : index
      %bi = memref.extract_aligned_pointer_as_index %bar : memref<1xi64, #gpu.address_space<workgroup>> -> index
      %b64 = arith.index_cast %bi : index to i64
      %p = llvm.inttoptr %b64 : i64 to !llvm.ptr<3>
      %si = memref.extract_aligned_pointer_as_index %buf : memref<256xf32, #gpu.address_space<workgroup>> -> index
      %s64 = arith.index_cast %si : index to i64
      %s3 = llvm.inttoptr %s64 : i64 to !llvm.ptr<3>
      %dst = llvm.addrspacecast %s3 : !llvm.ptr<3> to !llvm.ptr<7>
      %one = arith.constant 1 : i32
      %bytes = arith.constant 1024 : i32
      %zero = arith.constant 0 : i32
      %ticks = arith.constant 1000 : i32
      scf.if %producer {
        nvvm.mbarrier.init %p, %one : !llvm.ptr<3>, i32
        nvvm.mbarrier.arrive.expect_tx %p, %bytes : !llvm.ptr<3>, i32
        nvvm.cp.async.bulk.tensor.shared.cluster.global %dst, %desc, %p, box[%zero] : !llvm.ptr<7>, !llvm.ptr
      }
      gpu.barrier
      nvvm.mbarrier.try_wait.parity %p, %zero, %ticks : !llvm.ptr<3>, i32, i32
      %v0 = memref.load %buf[%tid] : memref<256xf32, #gpu.address_space<workgroup>>
      scf.if %release {
        gpu.barrier
      }
      scf.if %producer {
        nvvm.mbarrier.arrive.expect_tx %p, %bytes : !llvm.ptr<3>, i32
        nvvm.cp.async.bulk.tensor.shared.cluster.global %dst, %desc, %p, box[%zero] : !llvm.ptr<7>, !llvm.ptr
      }
      nvvm.mbarrier.try_wait.parity %p, %one, %ticks : !llvm.ptr<3>, i32, i32
      %v1 = memref.load %buf[%tid] : memref<256xf32, #gpu.address_space<workgroup>>
      %sum = arith.addf %v0, %v1 : f32
      memref.store %sum, %out[%tid] : memref<?xf32>
      gpu.return
    }

    // Every thread writes two elements of the stage; thread 0 stores it to
    // %desc's array with TMA; then every thread writes the stage again. With
    // %wait thread 0 waits for the store's bulk group (wait_smem_to_gmem)
    // before the barrier; without it the stage is overwritten while the
    // store may still read it.
    gpu.func @tma_store_then_overwrite(%out: memref<?xf32>, %desc: !llvm.ptr, %wait: i1) workgroup(%buf: memref<256xf32, #gpu.address_space<workgroup>> {llvm.align = 128 : i64}) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c128 = arith.constant 128 : index
      %is0 = arith.cmpi eq, %tid, %c0 : index
      %hi = arith.addi %tid, %c128 : index
      %si = memref.extract_aligned_pointer_as_index %buf : memref<256xf32, #gpu.address_space<workgroup>> -> index
      %s64 = arith.index_cast %si : index to i64
      %s3 = llvm.inttoptr %s64 : i64 to !llvm.ptr<3>
      %origin = arith.constant 0 : i32
      %t32 = arith.index_cast %tid : index to i32
      %v = arith.sitofp %t32 : i32 to f32
      memref.store %v, %buf[%tid] : memref<256xf32, #gpu.address_space<workgroup>>
      memref.store %v, %buf[%hi] : memref<256xf32, #gpu.address_space<workgroup>>
      nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
      gpu.barrier
      scf.if %is0 {
        nvvm.cp.async.bulk.tensor.global.shared.cta %desc, %s3, box[%origin] : !llvm.ptr, !llvm.ptr<3>
        nvvm.cp.async.bulk.commit.group
        scf.if %wait {
          nvvm.cp.async.bulk.wait_group 0 {read}
        }
      }
      gpu.barrier
      %zero = arith.constant 0.0 : f32
      memref.store %zero, %buf[%tid] : memref<256xf32, #gpu.address_space<workgroup>>
      gpu.return
    }

    // The twin of tma_store_then_overwrite that waits for its store, with the
    // threads' fence.proxy.async before the barrier only when %fence: without
    // it the TMA store (the async proxy) may not see their stores.
    gpu.func @tma_store_unfenced(%out: memref<?xf32>, %desc: !llvm.ptr, %fence: i1) workgroup(%buf: memref<256xf32, #gpu.address_space<workgroup>> {llvm.align = 128 : i64}) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c128 = arith.constant 128 : index
      %is0 = arith.cmpi eq, %tid, %c0 : index
      %hi = arith.addi %tid, %c128 : index
      %si = memref.extract_aligned_pointer_as_index %buf : memref<256xf32, #gpu.address_space<workgroup>> -> index
      %s64 = arith.index_cast %si : index to i64
      %s3 = llvm.inttoptr %s64 : i64 to !llvm.ptr<3>
      %origin = arith.constant 0 : i32
      %t32 = arith.index_cast %tid : index to i32
      %v = arith.sitofp %t32 : i32 to f32
      memref.store %v, %buf[%tid] : memref<256xf32, #gpu.address_space<workgroup>>
      memref.store %v, %buf[%hi] : memref<256xf32, #gpu.address_space<workgroup>>
      scf.if %fence {
        nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
      }
      gpu.barrier
      scf.if %is0 {
        nvvm.cp.async.bulk.tensor.global.shared.cta %desc, %s3, box[%origin] : !llvm.ptr, !llvm.ptr<3>
        nvvm.cp.async.bulk.commit.group
        nvvm.cp.async.bulk.wait_group 0 {read}
      }
      gpu.barrier
      %zero = arith.constant 0.0 : f32
      memref.store %zero, %buf[%tid] : memref<256xf32, #gpu.address_space<workgroup>>
      gpu.return
    }

    // wgmma on a TMA-staged operand: thread 0 copies x (64 rows x 16 bf16)
    // into %buf with a 32-byte swizzle; the warpgroup multiplies its rows by
    // rows 0..7 (A = x, B = x[0:8], both K-major, one descriptor) through a
    // descriptor whose high bits (%desc_high: stride byte offset, swizzle
    // mode) the test gives, and each thread writes its 4 accumulator
    // registers to out[4 tid ..]. With %early thread 0 zeroes buf[0] after a
    // barrier but before the wgmma.wait_group, while the multiply may still
    // read it; without it, after the wait (the twin). The results are read as
    // the compiler's accumulator loads read them, through the copy fence
    // (kCopyOperandsAsm), after the wait; with %read_early (planted) before it.
    // With %store_early (planted) the registers, kept in a slot as the lowering
    // keeps an accumulator, are overwritten by an accumulator store
    // (pallas.accumulator_store) before the wait.
    gpu.func @wgmma_tma_operand(%out: memref<?xf32>, %desc: !llvm.ptr, %desc_high: i64, %early: i1, %read_early: i1, %store_early: i1) workgroup(%bar: memref<1xi64, #gpu.address_space<workgroup>> {llvm.align = 8 : i64}, %buf: memref<4096xbf16, #gpu.address_space<workgroup>> {llvm.align = 1024 : i64}) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %tid = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %is0 = arith.cmpi eq, %tid, %c0 : index
      %bi = memref.extract_aligned_pointer_as_index %bar : memref<1xi64, #gpu.address_space<workgroup>> -> index
      %b64 = arith.index_cast %bi : index to i64
      %p = llvm.inttoptr %b64 : i64 to !llvm.ptr<3>
      %si = memref.extract_aligned_pointer_as_index %buf : memref<4096xbf16, #gpu.address_space<workgroup>> -> index
      %s64 = arith.index_cast %si : index to i64
      %s3 = llvm.inttoptr %s64 : i64 to !llvm.ptr<3>
      %dst = llvm.addrspacecast %s3 : !llvm.ptr<3> to !llvm.ptr<7>
      %one = arith.constant 1 : i32
      %bytes = arith.constant 2048 : i32
      %origin = arith.constant 0 : i32
      %ticks = arith.constant 1000 : i32
      scf.if %is0 {
        nvvm.mbarrier.init %p, %one : !llvm.ptr<3>, i32
      }
      gpu.barrier
      scf.if %is0 {
        nvvm.mbarrier.arrive.expect_tx %p, %bytes : !llvm.ptr<3>, i32
        nvvm.cp.async.bulk.tensor.shared.cluster.global %dst, %desc, %p, box[%origin, %origin] : !llvm.ptr<7>, !llvm.ptr
      }
      nvvm.mbarrier.try_wait.parity %p, %origin, %ticks : !llvm.ptr<3>, i32, i32
      // The descriptor: (address & 0x3ffff) >> 4, leading byte offset 1, %desc_high.
      %mask = arith.constant 262143 : i64
      %four = arith.constant 4 : i64
      %lbo = arith.constant 65536 : i64
      %low = arith.andi %s64, %mask : i64
      %start = arith.shrui %low, %four : i64
      %d0 = arith.ori %start, %lbo : i64
      %d = arith.ori %d0, %desc_high : i64
      %zero = arith.constant 0.0 : f32
      %u = llvm.mlir.undef : !llvm.struct<(f32, f32, f32, f32)>
      %a0 = llvm.insertvalue %zero, %u[0] : !llvm.struct<(f32, f32, f32, f32)>
      %a1 = llvm.insertvalue %zero, %a0[1] : !llvm.struct<(f32, f32, f32, f32)>
      %a2 = llvm.insertvalue %zero, %a1[2] : !llvm.struct<(f32, f32, f32, f32)>
      %acc = llvm.insertvalue %zero, %a2[3] : !llvm.struct<(f32, f32, f32, f32)>
      nvvm.wgmma.fence.aligned
      %r = nvvm.wgmma.mma_async %d, %d, %acc, <m = 64, n = 8, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>] : !llvm.struct<(f32, f32, f32, f32)> -> !llvm.struct<(f32, f32, f32, f32)>
      nvvm.wgmma.commit.group.sync.aligned
      gpu.barrier
      %zb = arith.constant 0.0 : bf16
      %true = arith.constant true
      %late = arith.xori %early, %true : i1
      %now = arith.andi %is0, %early : i1
      scf.if %now {
        memref.store %zb, %buf[%c0] : memref<4096xbf16, #gpu.address_space<workgroup>>
      }
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %c4 = arith.constant 4 : index
      %o0 = arith.muli %tid, %c4 : index
      %o1 = arith.addi %o0, %c1 : index
      %o2 = arith.addi %o0, %c2 : index
      %o3 = arith.addi %o0, %c3 : index
      %e0 = llvm.extractvalue %r[0] : !llvm.struct<(f32, f32, f32, f32)>
      %e1 = llvm.extractvalue %r[1] : !llvm.struct<(f32, f32, f32, f32)>
      %e2 = llvm.extractvalue %r[2] : !llvm.struct<(f32, f32, f32, f32)>
      %e3 = llvm.extractvalue %r[3] : !llvm.struct<(f32, f32, f32, f32)>
      %read_late = arith.xori %read_early, %true : i1
      scf.if %store_early {
        %n1 = llvm.mlir.constant(1 : i32) : i32
        %slot = llvm.alloca %n1 x vector<4xf32> : (i32) -> !llvm.ptr
        %u4 = llvm.mlir.undef : vector<4xf32>
        %i0 = llvm.mlir.constant(0 : i32) : i32
        %i1 = llvm.mlir.constant(1 : i32) : i32
        %i2 = llvm.mlir.constant(2 : i32) : i32
        %i3 = llvm.mlir.constant(3 : i32) : i32
        %w0 = llvm.insertelement %e0, %u4[%i0 : i32] : vector<4xf32>
        %w1 = llvm.insertelement %e1, %w0[%i1 : i32] : vector<4xf32>
        %w2 = llvm.insertelement %e2, %w1[%i2 : i32] : vector<4xf32>
        %w3 = llvm.insertelement %e3, %w2[%i3 : i32] : vector<4xf32>
        llvm.store %w3, %slot : vector<4xf32>, !llvm.ptr
        %zeros4 = llvm.mlir.constant(dense<0.0> : vector<4xf32>) : vector<4xf32>
        llvm.store %zeros4, %slot {pallas.accumulator_store} : vector<4xf32>, !llvm.ptr
      }
      scf.if %read_early {
        %v = llvm.inline_asm has_side_effects asm_dialect = att "// pallas: copy wgmma operands", "=f,=f,=f,=f,f,f,f,f" %e0, %e1, %e2, %e3 : (f32, f32, f32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
        %v0 = llvm.extractvalue %v[0] : !llvm.struct<(f32, f32, f32, f32)>
        memref.store %v0, %out[%o0] : memref<?xf32>
      }
      nvvm.wgmma.wait.group.sync.aligned 0
      gpu.barrier
      %after = arith.andi %is0, %late : i1
      scf.if %after {
        memref.store %zb, %buf[%c0] : memref<4096xbf16, #gpu.address_space<workgroup>>
      }
      scf.if %read_late {
        %v = llvm.inline_asm has_side_effects asm_dialect = att "// pallas: copy wgmma operands", "=f,=f,=f,=f,f,f,f,f" %e0, %e1, %e2, %e3 : (f32, f32, f32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
        %v0 = llvm.extractvalue %v[0] : !llvm.struct<(f32, f32, f32, f32)>
        %v1 = llvm.extractvalue %v[1] : !llvm.struct<(f32, f32, f32, f32)>
        %v2 = llvm.extractvalue %v[2] : !llvm.struct<(f32, f32, f32, f32)>
        %v3 = llvm.extractvalue %v[3] : !llvm.struct<(f32, f32, f32, f32)>
        memref.store %v0, %out[%o0] : memref<?xf32>
        memref.store %v1, %out[%o1] : memref<?xf32>
        memref.store %v2, %out[%o2] : memref<?xf32>
        memref.store %v3, %out[%o3] : memref<?xf32>
      }
      gpu.return
    }
  }
}
