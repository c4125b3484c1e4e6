// Correct output, but uses its input x as scratch (overwrites it). Must be rejected: the caller's
// inputs are not the candidate's to change.
// launches: [{"kernel": "sin_chain", "grid": ["ceil_div(n, 256)"], "block": [256], "args": ["x", "y", "out", "int32:n"]}]
// expect: rejected input_mutation
extern "C" __global__ void sin_chain(float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float b = y[i];
    for (int k = 0; k < 64; ++k) x[i] = sinf(x[i]) + b;
    out[i] = x[i];
}
