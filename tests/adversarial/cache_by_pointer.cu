// Remembers the input pointer of the last call and skips all work when it sees it again. The
// evaluator's second correctness round writes new data into the same buffers (and the post-timing
// check poisons the output first), so the stale/unwritten output must fail.
// launches: [{"kernel": "sin_chain", "grid": ["ceil_div(n, 256)"], "block": [256], "args": ["x", "y", "out", "int32:n"]}, {"kernel": "remember", "grid": [1], "block": [1], "args": ["x"]}]
// expect: incorrect
__device__ const float* g_last_x = nullptr;
extern "C" __global__ void sin_chain(const float* x, const float* y, float* out, int n) {
    if (g_last_x == x) return;  // "already computed for this buffer"
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float z = x[i], b = y[i];
    for (int k = 0; k < 64; ++k) z = sinf(z) + b;
    out[i] = z;
}
extern "C" __global__ void remember(const float* x) { g_last_x = x; }
