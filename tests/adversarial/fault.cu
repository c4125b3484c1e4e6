// Writes through a wild pointer: an illegal address. The process loses its CUDA context; the runner
// must record runtime_error for this workload and go on with the next candidate.
// launches: [{"kernel": "sin_chain", "grid": ["ceil_div(n, 256)"], "block": [256], "args": ["x", "y", "out", "int32:n"]}]
// expect: runtime_error
extern "C" __global__ void sin_chain(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float* wild = (float*)(0x10ull + 4096ull * 1024ull * 1024ull * 1024ull);
    wild[i] = x[i];
    out[i] = y[i];
}
