// Writes only the first half of the output. The poisoned (NaN) second half must fail correctness.
// launches: [{"kernel": "sin_chain", "grid": ["ceil_div(n, 256)"], "block": [256], "args": ["x", "y", "out", "int32:n"]}]
// expect: incorrect
extern "C" __global__ void sin_chain(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n / 2) return;
    float z = x[i], b = y[i];
    for (int k = 0; k < 64; ++k) z = sinf(z) + b;
    out[i] = z;
}
