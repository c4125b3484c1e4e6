// Never finishes. The runner must kill the process group at the time limit and record timeout.
// launches: [{"kernel": "sin_chain", "grid": ["ceil_div(n, 256)"], "block": [256], "args": ["x", "y", "out", "int32:n"]}]
// expect: timeout
extern "C" __global__ void sin_chain(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    volatile float z = x[i & 0];
    while (z == z) { z = z + 1.0f; }
    if (i < n) out[i] = z;
}
