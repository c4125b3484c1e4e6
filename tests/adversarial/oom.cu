// Asks for a petabyte of scratch memory. Must be recorded as oom, not crash the run.
// launches: [{"kernel": "sin_chain", "grid": ["ceil_div(n, 256)"], "block": [256], "args": ["x", "y", "out", "int32:n"]}]
// workspace: 1125899906842624
// expect: oom
extern "C" __global__ void sin_chain(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}
