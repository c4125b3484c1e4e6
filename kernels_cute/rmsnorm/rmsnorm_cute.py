# RMSNorm in the CuTe DSL: y = x * rsqrt(mean(x^2) + eps) * w over a constant last dimension.
#
# The family (solforge/kernels/cute_rmsnorm.py) prepends the module globals: HIDDEN, THREADS, VEC
# (params, set before this runs) and DTYPES, the element type of each tensor argument by name
# (the compile backend reads it for the kernel's pointer types). One CTA per row: each thread
# keeps HIDDEN / (THREADS * VEC) vectors of VEC elements in registers (one 16-byte load each),
# the sum of squares is reduced with warp shuffles and one shared-memory step, and the row is
# written once, so the kernel moves the minimum bytes.
import cutlass
import cutlass.cute as cute


class RMSNormCute:
    """Static config (hidden size, threads per row, vector width, element type) + launcher + body."""

    def __init__(self, hidden: int, threads: int, vec: int, dtype):
        assert hidden % (threads * vec) == 0, "each thread takes whole vectors"
        self.hidden, self.threads, self.vec, self.dtype = hidden, threads, vec, dtype
        self.npt = hidden // (threads * vec)      # vectors per thread
        self.nwarps = threads // 32

    @cute.jit
    def __call__(self, x: cute.Pointer, w: cute.Pointer, y: cute.Pointer, rows: cutlass.Int32,
                 eps: cutlass.Float32, stream):
        self.kernel(x, w, y, rows, eps).launch(grid=[rows, 1, 1], block=[self.threads, 1, 1],
                                               stream=stream)

    @cute.kernel
    def kernel(self, x: cute.Pointer, w: cute.Pointer, y: cute.Pointer, rows: cutlass.Int32,
               eps: cutlass.Float32):
        tidx, _, _ = cute.arch.thread_idx()
        row, _, _ = cute.arch.block_idx()
        layout = cute.make_layout((rows, self.hidden), stride=(self.hidden, 1))
        mX = cute.make_tensor(x, layout)
        mY = cute.make_tensor(y, layout)
        mW = cute.make_tensor(w, cute.make_layout(self.hidden))
        # (VEC, vectors) views of this row and of the weight
        gX = cute.zipped_divide(mX[row, None], (self.vec,))
        gY = cute.zipped_divide(mY[row, None], (self.vec,))
        gW = cute.zipped_divide(mW, (self.vec,))

        # weight first, with x: after the reduction it would cost a second DRAM round trip
        tWrW = cute.make_rmem_tensor((self.vec, self.npt), self.dtype)
        for i in cutlass.range_constexpr(self.npt):
            cute.autovec_copy(gW[None, tidx + i * self.threads], tWrW[None, i])
        tXrX = cute.make_rmem_tensor((self.vec, self.npt), self.dtype)
        for i in cutlass.range_constexpr(self.npt):
            cute.autovec_copy(gX[None, tidx + i * self.threads], tXrX[None, i])
        xf = tXrX.load().to(cutlass.Float32)
        ss = (xf * xf).reduce(cute.ReductionOp.ADD, cutlass.Float32(0.0), reduction_profile=0)

        ss = cute.arch.warp_reduction_sum(ss)
        sRed = cute.make_tensor(cute.arch.alloc_smem(cutlass.Float32, self.nwarps),
                                cute.make_layout(self.nwarps))
        warp = tidx // 32
        if tidx % 32 == 0:
            sRed[warp] = ss
        cute.arch.sync_threads()
        total = cutlass.Float32(0.0)
        for k in cutlass.range_constexpr(self.nwarps):
            total = total + sRed[k]
        inv = cute.math.rsqrt(total / cutlass.Float32(self.hidden) + eps)

        out = (xf * inv) * tWrW.load().to(cutlass.Float32)
        tYrY = cute.make_rmem_tensor((self.vec, self.npt), self.dtype)
        tYrY.store(out.to(self.dtype))
        for i in cutlass.range_constexpr(self.npt):
            cute.autovec_copy(tYrY[None, i], gY[None, tidx + i * self.threads])


_DT = {0: cutlass.Float32, 1: cutlass.Float16, 2: cutlass.BFloat16}
# The entry point the launch spec names: the kernel of an instance holding this problem's config.
rmsnorm_cute = RMSNormCute(HIDDEN, THREADS, VEC, _DT[DTYPE]).kernel  # noqa: F821 (params)
