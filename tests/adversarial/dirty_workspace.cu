// Declares that it keeps its workspace zeroed itself (workspace_zero "0": the harness zeroes nothing),
// then marks it after the first call and skips all work on every later call of the same plan. A fresh
// plan (each correctness round) computes; only the timed plan re-used after timing exposes it: the
// post-timing check runs that same plan on a poisoned output, so the unwritten output must fail.
// launches: [{"kernel": "sin_chain", "grid": ["ceil_div(n, 256)"], "block": [256], "args": ["x", "y", "out", "int32:n", "workspace"]}, {"kernel": "mark", "grid": [1], "block": [1], "args": ["workspace"]}]
// workspace: 4
// workspace_zero: 0
// expect: incorrect
extern "C" __global__ void sin_chain(const float* x, const float* y, float* out, int n,
                                     const unsigned* ws) {
    if (*ws != 0u) return;  // "ran before on this workspace"
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float z = x[i], b = y[i];
    for (int k = 0; k < 64; ++k) z = sinf(z) + b;
    out[i] = z;
}
extern "C" __global__ void mark(unsigned* ws) { *ws = 1u; }
