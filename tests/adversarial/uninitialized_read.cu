// Accumulates into the output as if it started at zero (reads memory nobody initialised for it).
// The evaluator poisons outputs with NaN before every run, so this must fail correctness.
// launches: [{"kernel": "sin_chain", "grid": ["ceil_div(n, 256)"], "block": [256], "args": ["x", "y", "out", "int32:n"]}]
// expect: incorrect
extern "C" __global__ void sin_chain(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float z = x[i], b = y[i];
    for (int k = 0; k < 64; ++k) z = sinf(z) + b;
    out[i] += z;
}
